"""A follower relaying calls to a frozen leader still answers who leads.

Found by ``bench/chaos_cli.py`` at T = 20 s: for 42 s after the leader was frozen no
replica answered ``GetLeaderAddress`` as the leader within 1 s, while the CLI's own calls
got through. Clients that could not reach the frozen leader sent their calls through a
follower; each relay held one of the follower's gRPC threads for the call's whole
deadline (30 s for a change), even once the client had given up and cancelled, so the
follower, soon the new leader, had no thread left for discovery.

Real replicas, a real SIGSTOP. Silence preemption is off and T is long, so the frozen
leader stays the leader the followers relay to for the whole test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cluster.api import pb, rpc
from nimbus.server.forward import FORWARD_SLOTS
from tests.cluster import Replica, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, sync_flags
from tests.waiting import wait_until

RELAY = (("nimbus-forward", "1"),)
#: Long enough that the frozen leader is never replaced during a test.
T = 30.0


@pytest.fixture
def frozen(spawn: Spawn) -> Iterator[tuple[Replica, Replica]]:
    """(a follower, the frozen leader)."""
    replicas = [
        spawn(extra=(*sync_flags(), "--silence-window", "0"), session_timeout=T) for _ in range(3)
    ]
    known = wait_for_agreed_leader(replicas, timeout=40)
    leader = next(r for r in replicas if r.address == known.replica_id)
    follower = next(r for r in replicas if r is not leader)
    # The follower's channel to the leader is up before the freeze, as in a running cluster.
    with pytest.raises(grpc.RpcError) as warm:
        relayed(follower.stub(), 1)[0].result()
    assert warm.value.code() == grpc.StatusCode.NOT_FOUND, warm.value
    with leader.paused():
        yield follower, leader


def relayed(stub: rpc.NimbusStub, n: int, timeout: float = 25.0) -> list[Any]:
    """``n`` relayed calls in flight (gRPC call futures, which are also RpcErrors)."""
    return [
        stub.DeactivateTopology.future(
            pb.TopologyNameRequest(name="t", client_request_id=f"relay-{i}"),
            timeout=timeout,
            metadata=RELAY,
        )
        for i in range(n)
    ]


def busy(stub: rpc.NimbusStub) -> bool:
    """Whether one more relayed call is turned away at once for want of a relay slot."""
    try:
        stub.DeactivateTopology(
            pb.TopologyNameRequest(name="t", client_request_id="probe"), timeout=0.5, metadata=RELAY
        )
    except grpc.RpcError as e:
        return bool(e.code() == grpc.StatusCode.UNAVAILABLE and "relaying" in (e.details() or ""))
    return False


def test_relays_stuck_on_a_frozen_leader_leave_discovery_answering(
    frozen: tuple[Replica, Replica],
) -> None:
    follower, leader = frozen
    stub = follower.stub()
    waiting = relayed(stub, 40)  # more than the server's threads, none given up
    try:
        # Who leads is answered within a poller's 1 s all along, as the relays pile up.
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            reply = stub.GetLeaderAddress(pb.GetLeaderAddressRequest(), timeout=1.0)
            assert reply.replica_id == leader.address
            assert not reply.responder_is_leader
        turned_away = [f for f in waiting if f.done() and f.code() == grpc.StatusCode.UNAVAILABLE]
        assert len(turned_away) == len(waiting) - FORWARD_SLOTS
        assert "relaying" in (turned_away[0].details() or "")
    finally:
        for f in waiting:
            f.cancel()


def test_a_relay_the_client_gave_up_on_frees_its_slot(frozen: tuple[Replica, Replica]) -> None:
    follower, _ = frozen
    stub = follower.stub()
    waiting = relayed(stub, FORWARD_SLOTS)
    wait_until(lambda: busy(stub), timeout=10, interval=0.1, message="relay slots full")
    for f in waiting:
        f.cancel()
    # Each relay is cancelled with its client's call, not held to its 25 s deadline.
    wait_until(lambda: not busy(stub), timeout=5, interval=0.1, message="relay slots freed")
