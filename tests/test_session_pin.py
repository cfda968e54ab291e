"""``cluster.session_pin`` on a real 3-server ensemble: a replica's bulk-read session sits
on the server of its election session from the start, and follows it when that session
moves to another server, keeping its own session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient, KazooState

from cluster.server_move import ServerMover, current_server
from cluster.session_pin import SessionPin
from devtools.zkserver import ZooKeeperCluster
from tests.test_server_move import attempts_logger
from tests.waiting import wait_until


@contextmanager
def _pinned(
    lead: KazooClient, bulk: KazooClient, *, quarantine: float
) -> Iterator[tuple[SessionPin, ServerMover]]:
    """``lead`` started, ``bulk`` pinned to its server and a mover of ``lead``; all of them
    stopped after the block."""
    lead.start(timeout=30)
    pin = SessionPin(lead, bulk)
    mover = ServerMover(lead, min_interval=60.0, quarantine=quarantine)
    try:
        yield pin, mover
    finally:
        pin.stop()
        mover.stop()
        for client in (bulk, lead):
            client.stop()
            client.close()


def test_the_bulk_session_starts_on_and_follows_the_election_sessions_server(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    lead = KazooClient(hosts=healthy_ensemble.connect_string, timeout=10.0)
    bulk = KazooClient(hosts=healthy_ensemble.connect_string, timeout=10.0)
    with _pinned(lead, bulk, quarantine=30.0) as (pin, mover):
        first = pin.start()  # before the bulk session connects, as the daemon does
        assert first is not None
        bulk.start(timeout=30)
        assert current_server(bulk) == first == current_server(lead)
        session = bulk.client_id[0]
        assert mover.move("planted: move the election session") is not None
        wait_until(
            lambda: current_server(lead) not in (None, first),
            timeout=30,
            message="the election session on another server",
        )
        wait_until(
            lambda: (
                bulk.state == KazooState.CONNECTED and current_server(bulk) == current_server(lead)
            ),
            timeout=30,
            message="the bulk session on the election session's new server",
        )
        assert bulk.client_id[0] == session, "the bulk session was kept"


def test_a_move_while_the_bulk_session_first_connects_is_followed(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    """The election session moves while the bulk session's first connection is under way
    to the old server (frozen for the moment, so the attempt waits there). That attempt
    lands on the old server once it thaws: the pin must look again when the bulk session
    connects, and move it, where it used to wait for the election session's next move."""
    leader = healthy_ensemble.leader_index()
    assert leader is not None
    old, new = [i for i in range(3) if i != leader]  # followers: freezing one keeps quorum
    ports = healthy_ensemble.client_ports
    lead = KazooClient(
        hosts=",".join(f"127.0.0.1:{ports[i]}" for i in (old, new, leader)),
        timeout=10.0,
        randomize_hosts=False,
    )
    logger, attempts = attempts_logger("bulk")
    bulk = KazooClient(hosts=healthy_ensemble.connect_string, timeout=10.0, logger=logger)
    with _pinned(lead, bulk, quarantine=60.0) as (pin, mover):
        assert pin.start() == f"127.0.0.1:{ports[old]}"
        healthy_ensemble.pause(old)
        bulk.start_async()
        wait_until(lambda: attempts.ports == [ports[old]], message="the bulk session connecting")
        assert mover.move("planted: move the election session") is not None
        target = f"127.0.0.1:{ports[new]}"
        wait_until(lambda: current_server(lead) == target, timeout=30, message="lead moved")
        wait_until(lambda: bulk.hosts == [("127.0.0.1", ports[new])], message="pinned anew")
        healthy_ensemble.resume(old)
        wait_until(
            lambda: bulk.state == KazooState.CONNECTED and current_server(bulk) == target,
            timeout=30,
            message="the bulk session on the election session's new server",
        )
        assert attempts.connected == [ports[old], ports[new]], "it did land on the old one"
