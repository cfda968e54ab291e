"""``cluster.session_pin`` on a real 3-server ensemble: a replica's bulk-read session sits
on the server of its election session from the start, and follows it when that session
moves to another server, keeping its own session."""

from __future__ import annotations

from kazoo.client import KazooClient, KazooState

from cluster.server_move import ServerMover, current_server
from cluster.session_pin import SessionPin
from devtools.zkserver import ZooKeeperCluster
from tests.waiting import wait_until


def test_the_bulk_session_starts_on_and_follows_the_election_sessions_server(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    lead = KazooClient(hosts=healthy_ensemble.connect_string, timeout=10.0)
    bulk = KazooClient(hosts=healthy_ensemble.connect_string, timeout=10.0)
    lead.start(timeout=30)
    pin = SessionPin(lead, bulk)
    mover = ServerMover(lead, min_interval=60.0, quarantine=30.0)
    try:
        first = pin.pin_now()
        assert first is not None
        bulk.start(timeout=30)
        pin.start()
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
    finally:
        pin.stop()
        mover.stop()
        for client in (bulk, lead):
            client.stop()
            client.close()
