"""A follower relaying calls to a frozen leader still answers who leads.

Clients that cannot reach the leader send their calls through a follower. Each relay
held one of the follower's gRPC threads for the call's whole deadline (30 s for a
change), even once its client had given up and cancelled; with the leader frozen, a
handful of clients took every thread, and the follower, soon the new leader, answered
no ``GetLeaderAddress`` within a poller's 1 s.

Real replicas, a real SIGSTOP. Silence preemption is off and T is long, so the frozen
leader stays the leader the followers relay to for the whole test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cluster.api import pb, rpc
from cluster.factory import make_grpc_server
from cluster.security.client import ClientSecurity
from nimbus.server.forward import FORWARD_SLOTS, Forwarder
from tests.cluster import Replica, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, sync_flags

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
        turned_away = [
            f
            for f in waiting
            if f.done()
            and f.code() == grpc.StatusCode.UNAVAILABLE
            and "relaying" in (f.details() or "")
        ]
        # Most are turned away at once; the relays given a slot end by keepalive (the
        # leader is frozen), so a slow start may let a few more in.
        assert len(turned_away) >= len(waiting) - 2 * FORWARD_SLOTS
    finally:
        for f in waiting:
            f.cancel()


class _StuckLeader(rpc.NimbusServicer):
    """A leader alive but stuck mid-call (on ZooKeeper, say): it answers pings, so only
    the relay's own cancel can end the call it holds."""

    def __init__(self) -> None:
        self.entered = 0
        self.entering = threading.Condition()
        self.cancelled = threading.Event()
        self.release = threading.Event()

    def wait_entered(self, n: int, timeout: float = 10.0) -> bool:
        with self.entering:
            return self.entering.wait_for(lambda: self.entered >= n, timeout)

    def DeactivateTopology(
        self, request: pb.TopologyNameRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        context.add_callback(self.cancelled.set)
        with self.entering:
            self.entered += 1
            self.entering.notify_all()
        self.release.wait(60)
        return pb.TopologyActionResponse(name=request.name)


class _Follower(rpc.NimbusServicer):
    def __init__(self, forwarder: Forwarder, leader: str) -> None:
        self._forwarder, self._leader = forwarder, leader

    def DeactivateTopology(
        self, request: pb.TopologyNameRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        return self._forwarder.forward(
            self._leader,
            context,
            lambda s, t, m: s.DeactivateTopology.future(request, timeout=t, metadata=m),
        )


@pytest.fixture
def stuck() -> Iterator[tuple[_StuckLeader, rpc.NimbusStub]]:
    """A stuck leader, and a stub of a follower that relays to it (in-process servers)."""
    leader = _StuckLeader()  # type: ignore[abstract]
    leader_server, leader_port = make_grpc_server("127.0.0.1:0")
    rpc.add_NimbusServicer_to_server(leader, leader_server)
    forwarder = Forwarder("follower:1", lambda: ClientSecurity())
    follower_server, follower_port = make_grpc_server("127.0.0.1:0")
    follower = _Follower(forwarder, f"127.0.0.1:{leader_port}")  # type: ignore[abstract]
    rpc.add_NimbusServicer_to_server(follower, follower_server)
    leader_server.start()
    follower_server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{follower_port}")
    try:
        yield leader, rpc.NimbusStub(channel)
    finally:
        leader.release.set()
        channel.close()
        forwarder.close()
        follower_server.stop(0)
        leader_server.stop(0)


def test_a_relay_ends_when_its_client_gives_up(
    stuck: tuple[_StuckLeader, rpc.NimbusStub],
) -> None:
    leader, stub = stuck
    call = relayed(stub, 1)[0]
    assert leader.wait_entered(1), "the relay never reached the leader"
    call.cancel()
    # Cancelled with its client's call, not held to its 25 s deadline.
    assert leader.cancelled.wait(10), "the relay still waits on the leader"


def test_relays_beyond_the_slots_are_turned_away_at_once(
    stuck: tuple[_StuckLeader, rpc.NimbusStub],
) -> None:
    leader, stub = stuck
    held = relayed(stub, FORWARD_SLOTS)
    try:
        assert leader.wait_entered(FORWARD_SLOTS), "the relays never reached the leader"
        more = relayed(stub, 3)
        for f in more:
            with pytest.raises(grpc.RpcError) as turned:
                f.result(timeout=10)
            assert turned.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "relaying" in (turned.value.details() or "")
        assert leader.entered == FORWARD_SLOTS
    finally:
        for f in held:
            f.cancel()
