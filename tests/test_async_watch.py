"""Watches that never hold kazoo's event thread (cluster.async_watch), on a real ZooKeeper.

kazoo's DataWatch reads its node again inside the watch callback, on the client's one
event thread: the replica next in line learnt that the node ahead was gone only after the
leader cache's read of ``/leader-epoch`` came back. Responses reach the watching client
through a proxy that delays them, so "the read is still out" lasts long enough to see.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import DataWatch as KazooDataWatch

from cluster.async_watch import ChildrenWatch, DataWatch
from cluster.factory import make_kazoo_client
from devtools.faultproxy import FaultProxy
from devtools.zkserver import ZooKeeperCluster
from tests.waiting import wait_until

DELAY = 0.3  # each message to the watching client, in seconds

OnData = Callable[[bytes | None, ZnodeStat | None], object]


def _order_of_events(
    zk_server: ZooKeeperCluster,
    zk_hosts: str,
    zk_client: KazooClient,
    make_watch: Callable[[KazooClient, str, OnData], object],
) -> list[str]:
    """``/a`` changes, then ``/b`` goes: the order in which the watching client saw the
    new data of ``/a`` and the deletion of ``/b``."""
    host, port = zk_server.connect_string.split(",")[0].split(":")
    chroot = zk_hosts[zk_hosts.index("/") :]
    zk_client.ensure_path("/a")
    zk_client.create("/b")
    seen: list[str] = []
    guard = threading.Lock()

    def on_data(data: bytes | None, _: ZnodeStat | None) -> None:
        if data == b"new":
            with guard:
                seen.append("a changed")

    def on_b(event: WatchedEvent) -> None:
        with guard:
            seen.append("b deleted")

    with FaultProxy(host, int(port)) as proxy:
        watcher = make_kazoo_client(f"{proxy.address}{chroot}", session_timeout=10.0)
        watcher.start(timeout=10)
        try:
            make_watch(watcher, "/a", on_data)
            assert watcher.exists("/b", watch=on_b) is not None
            proxy.delay(DELAY, direction="downstream")
            zk_client.set("/a", b"new")
            zk_client.delete("/b")
            assert wait_until(lambda: len(seen) == 2, timeout=10), seen
        finally:
            proxy.pass_through()
            watcher.stop()
            watcher.close()
    return seen


def test_a_watch_waits_on_no_read_of_another(
    zk_server: ZooKeeperCluster, zk_hosts: str, zk_client: KazooClient
) -> None:
    """The deletion is seen while the read of the changed node is still out."""
    seen = _order_of_events(
        zk_server, zk_hosts, zk_client, lambda c, p, cb: DataWatch(c, p, cb).start()
    )
    assert seen == ["b deleted", "a changed"]


def test_kazoos_data_watch_holds_the_event_thread(
    zk_server: ZooKeeperCluster, zk_hosts: str, zk_client: KazooClient
) -> None:
    """Why the module exists (and that the test above can fail): with kazoo's own
    DataWatch the deletion waits behind the read."""
    seen = _order_of_events(zk_server, zk_hosts, zk_client, KazooDataWatch)
    assert seen == ["a changed", "b deleted"]


@pytest.mark.parametrize("kind", ["data", "children"])
def test_watches_follow_changes_and_a_dropped_connection(
    zk_server: ZooKeeperCluster, zk_hosts: str, zk_client: KazooClient, kind: str
) -> None:
    """Every change arrives, also one made while the connection was down (kazoo drops
    its watches with the connection: the reconnect reads again)."""
    host, port = zk_server.connect_string.split(",")[0].split(":")
    chroot = zk_hosts[zk_hosts.index("/") :]
    zk_client.ensure_path("/w")
    values: list[object] = []
    with FaultProxy(host, int(port)) as proxy:
        watcher = make_kazoo_client(f"{proxy.address}{chroot}", session_timeout=10.0)
        watcher.start(timeout=10)
        try:
            if kind == "data":
                watch: DataWatch | ChildrenWatch = DataWatch(
                    watcher, "/w", lambda data, _stat: values.append(data)
                ).start()  # type: ignore[assignment]
                change: list[Callable[[], object]] = [
                    lambda: zk_client.set("/w", b"1"),
                    lambda: zk_client.set("/w", b"2"),
                ]
                want: list[object] = [b"", b"1", b"2"]
            else:
                watch = ChildrenWatch(
                    watcher, "/w", lambda children: values.append(sorted(children))
                ).start()  # type: ignore[assignment]
                change = [lambda: zk_client.create("/w/x"), lambda: zk_client.create("/w/y")]
                want = [[], ["x"], ["x", "y"]]
            assert wait_until(lambda: values[-1:] == want[:1], timeout=10), values
            change[0]()
            assert wait_until(lambda: values[-1:] == want[1:2], timeout=10), values
            proxy.reset(refuse_new=True)  # the connection drops; the session lives on
            assert wait_until(lambda: watcher.state != KazooState.CONNECTED, timeout=10)
            change[1]()
            proxy.refuse_new(False)
            assert wait_until(lambda: values[-1:] == want[2:], timeout=20), values
            watch.stop()
        finally:
            watcher.stop()
            watcher.close()
