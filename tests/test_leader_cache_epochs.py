"""A replica never reports an epoch lower than one it has already read (issue 31): a view
that goes back (a new session on a server that lags, a damaged record) makes the leader
"not known" until the view catches up, never an older term."""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from leader.discovery import LeaderCache
from tests.waiting import wait_until

PATHS = Paths("/storm")


def _record(epoch: int, lock_node: str) -> bytes:
    return records.LeaderEpoch(
        epoch=epoch, holder=f"h{epoch}:1", lock_node=lock_node, since_ms=1
    ).SerializeToString()


def test_an_epoch_behind_one_read_before_is_never_reported(zk_client: KazooClient) -> None:
    zk_client.ensure_path(PATHS.leader_lock)
    zk_client.ensure_path(PATHS.nimbuses)
    node = zk_client.create(f"{PATHS.leader_lock}/a__lock__", b"h:1", sequence=True)
    zk_client.create(PATHS.leader_epoch, _record(5, node))
    cache = LeaderCache(zk_client, PATHS)
    cache.start()

    def epoch() -> int | None:
        leader = cache.leader()
        return None if leader is None else leader.epoch

    wait_until(lambda: epoch() == 5, timeout=10, message="epoch 5 read")
    zk_client.set(PATHS.leader_epoch, _record(3, node))  # the view goes back
    wait_until(lambda: epoch() is None, timeout=10, message="the older term not reported")
    zk_client.set(PATHS.leader_epoch, _record(6, node))
    wait_until(lambda: epoch() == 6, timeout=10, message="a newer term reported again")
