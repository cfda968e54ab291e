"""The winner's reads sent ahead (``leader.read_ahead``) are as fresh as reads sent after
winning: whatever changed before the node ahead went is in them, and a win without a
listing happens only when nothing they read changed. On a chrooted client, as replicas
may run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kazoo.client import KazooClient

from cluster.paths import Paths
from fencing.membership import ensure_folders
from leader import read_ahead
from leader.read_ahead import ReadAheadLock, queue_lock
from tests.waiting import wait_until
from tests.zk_fixtures import kazoo_session

ROOT = "/storm"


@contextmanager
def _next_in_line(holder: KazooClient, follower: KazooClient) -> Iterator[ReadAheadLock]:
    """``holder`` holds the lock, ``follower`` waits right behind it with its reads sent
    behind watches; the block ends the holder's node (or finds it ended) and the follower
    wins within it."""
    paths = Paths(ROOT)
    ensure_folders(holder, paths.folders())
    assert queue_lock(holder, paths, "holder:1").acquire(timeout=10)
    lock = queue_lock(follower, paths, "follower:1")
    won = threading.Event()

    def wait_to_win() -> None:
        if lock.acquire():
            won.set()

    waiter = threading.Thread(target=wait_to_win, daemon=True)
    waiter.start()
    # Private on purpose: armed is a moment, not a state a caller should ever wait on.
    wait_until(lambda: lock._next is not None, timeout=10, message="the follower armed")
    yield lock
    assert won.wait(10), "the follower never won"
    waiter.join(5)


def _storms_cversion(client: KazooClient) -> int:
    stat = client.exists(Paths(ROOT).storms)
    assert stat is not None
    return int(stat.cversion)


def test_the_node_ahead_going_is_a_win_without_a_listing_with_reads_still_current(
    zk_client: KazooClient, zk_hosts: str
) -> None:
    with kazoo_session(zk_hosts) as follower, _next_in_line(zk_client, follower) as lock:
        holder_node = Paths(ROOT).lock_node(_first(zk_client))
        zk_client.delete(holder_node)
    assert lock.skipped_listing
    assert lock.reads is not None
    assert lock.reads.storms.get().cversion == _storms_cversion(zk_client)


def test_a_topology_added_just_before_the_node_ahead_goes_is_in_the_winners_reads(
    zk_client: KazooClient, zk_hosts: str
) -> None:
    paths = Paths(ROOT)
    with kazoo_session(zk_hosts) as follower, _next_in_line(zk_client, follower) as lock:
        # One transaction: the /storms event and the deletion come back to back, the
        # tightest a leader's last write and its hand-over can be.
        tx = zk_client.transaction()
        tx.create(paths.storm("t-1"), b"")
        tx.delete(paths.lock_node(_first(zk_client)))
        assert all(r is True or isinstance(r, str) for r in tx.commit())
    assert lock.reads is not None
    seen = lock.reads.storms.get()
    assert seen.cversion == _storms_cversion(zk_client)  # t-1 is in what the gate reads
    assert seen.numChildren == 1


def _first(client: KazooClient) -> str:
    names = client.get_children(Paths(ROOT).leader_lock)
    return str(min(names, key=lambda n: n[-10:]))


def test_a_large_storms_folder_is_not_listed_to_watch_it(
    zk_client: KazooClient, zk_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bulk reads stay off the election session: past the bound, a handover lists.
    monkeypatch.setattr(read_ahead, "WATCHED_STORMS_MAX", 0)
    paths = Paths(ROOT)
    ensure_folders(zk_client, paths.folders())
    zk_client.create(paths.storm("t-1"), b"")
    assert queue_lock(zk_client, paths, "holder:1").acquire(timeout=10)
    with kazoo_session(zk_hosts) as follower:
        lock = queue_lock(follower, paths, "follower:1")
        waiter = threading.Thread(target=lock.acquire, daemon=True)
        waiter.start()
        wait_until(lambda: len(zk_client.get_children(paths.leader_lock)) == 2, timeout=10)
        wait_until(lambda: lock.reads is not None and lock.reads.storms.ready(), timeout=10)
        assert lock._next is None  # not armed
        zk_client.delete(paths.lock_node(_first(zk_client)))
        waiter.join(10)
        assert lock.is_acquired and not lock.skipped_listing
