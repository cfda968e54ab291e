"""A replica whose ZooKeeper server holds its writes on a connection that stays up (a
server frozen, or cut from its quorum, keeps its clients for syncLimit): its beater
notices the beat unanswered and the replica moves to another server with the same
session, and beats again there. Real 3-server ensemble; the follower is SIGSTOPped."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient

from cluster.paths import Paths
from cluster.server_move import Move, ServerMover, current_server
from devtools.zkserver import ZooKeeperCluster
from fencing import ensure_folders
from fencing.lease import Lease
from leader.heartbeat import STALL_REPORT_GROWTH, Beater
from tests.waiting import wait_until


def queued_beater(client: KazooClient, prefix: str, on_lock_gone: Callable[[], None]) -> Beater:
    """A beater for a lock node of its own in a fresh queue (0.2 s beats, T = 10 s)."""
    paths = Paths(f"{prefix}-{uuid.uuid4().hex[:8]}")
    ensure_folders(client, paths.folders())
    lock_node = client.create(f"{paths.leader_lock}/r1__lock__", ephemeral=True, sequence=True)
    return Beater(
        client, paths, "r1", own_node=lambda: lock_node, lease=Lease(0.8), interval=0.2,
        timeout=10.0, on_lock_gone=lambda _node: on_lock_gone(),
    )  # fmt: skip


def test_a_beat_held_by_a_frozen_server_moves_the_replica_and_it_beats_again(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    zk = healthy_ensemble
    follower = next(i for i in range(zk.size) if zk.node_mode(i) == "follower")
    others = [i for i in range(zk.size) if i != follower]
    hosts = ",".join(zk.node_connect_string(i) for i in [follower, *others])
    client = KazooClient(hosts=hosts, timeout=10.0, randomize_hosts=False)
    client.start(timeout=30)
    acked: list[float] = []
    moves: list[Move] = []
    mover = ServerMover(client, min_interval=2.0, quarantine=30.0, on_move=moves.append)
    gone = threading.Event()
    beater = queued_beater(client, "/stall", on_lock_gone=gone.set)
    beater.add_listener(lambda ack: acked.append(ack.sent))
    beater.on_stall(lambda: 1.0, lambda stalled: mover.move(f"planted: beat held {stalled:.1f}s"))
    session = client.client_id[0]
    frozen = current_server(client)
    beater.start()
    try:
        wait_until(lambda: len(acked) >= 3, timeout=20, message="beats acknowledged")
        zk.pause(follower)
        paused_at = time.monotonic()
        wait_until(
            lambda: any(sent > paused_at for sent in acked),
            timeout=20,
            message="a beat acknowledged after the server froze",
        )
        assert [m.suspect for m in moves] == [frozen], "moved once, off the frozen server"
        assert current_server(client) not in (None, frozen)
        assert client.client_id[0] == session, "the same session"
        assert not gone.is_set(), "the lock node outlived the move"
    finally:
        beater.stop()
        mover.stop()
        zk.resume(follower)
        client.stop()
        client.close()


def test_a_stall_that_goes_on_is_reported_again_as_it_grows(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    """A move refused at the first report (no other server looked faster yet: CI saw this
    under a uniformly slow disk, and kazoo's own reconnect came first) must be asked again
    while the beat stays unanswered, each time with a longer wait: one report per stall
    never asked again."""
    zk = healthy_ensemble
    follower = next(i for i in range(zk.size) if zk.node_mode(i) == "follower")
    client = KazooClient(hosts=zk.node_connect_string(follower), timeout=10.0)
    client.start(timeout=30)
    acked: list[float] = []
    reports: list[float] = []
    beater = queued_beater(client, "/stall-again", on_lock_gone=lambda: None)
    beater.add_listener(lambda ack: acked.append(ack.sent))
    beater.on_stall(lambda: 0.5, reports.append)
    beater.start()
    try:
        wait_until(lambda: len(acked) >= 3, timeout=20, message="beats acknowledged")
        zk.pause(follower)
        # 0.5 s, then at 1.5x each: 0.75, 1.125 (kazoo drops the link only after 2/3 T).
        wait_until(lambda: len(reports) >= 3, timeout=5, message="the stall reported again")
        zk.resume(follower)
        assert reports[0] >= 0.5
        for before, after in itertools.pairwise(reports[:3]):
            assert after >= before * STALL_REPORT_GROWTH, f"reported at {reports}"
    finally:
        beater.stop()
        zk.resume(follower)
        client.stop()
        client.close()
