"""Bugs the chaos soak found, pinned down in-process so they cannot come back."""

from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from devtools.faultproxy import FaultProxy
from devtools.zkserver import ZooKeeperCluster
from leader.elector import Elector
from leader.settings import ElectorCallbacks, ElectorSettings
from tests.waiting import wait_until

ROOT = "/storm"


def test_a_zookeeper_error_while_rechecking_after_a_reconnect_keeps_the_term(
    zk_server: ZooKeeperCluster, zk_hosts: str, zk_client: KazooClient
) -> None:
    """Soak, ``zk-kill-leader``: the connection dropped again while the leader re-ran its
    code gate after reconnecting; the error read as "lacking code", it gave up its still
    valid lock node and another replica took office. It must keep the term instead."""
    for folder in Paths(ROOT).folders():
        zk_client.ensure_path(folder)
    host, port = zk_server.node_connect_string(0).split(":")
    proxy = FaultProxy(host, int(port)).start()
    client = make_kazoo_client(
        f"{proxy.address}{zk_hosts[zk_hosts.index('/') :]}", session_timeout=4.0
    )
    client.start(timeout=30)
    fail_next = threading.Event()

    def gate() -> bool:
        if fail_next.is_set():
            fail_next.clear()
            raise ConnectionLoss()  # what kazoo raises when the link drops mid-read
        return True

    elector = Elector(
        client,
        ElectorSettings(paths=Paths(ROOT), replica_id="me:1", session_timeout=4.0),
        ElectorCallbacks(has_all_code=gate),
    )
    elector.start()
    try:
        assert elector.wait_for(lambda h: "took office, epoch 1" in h, timeout=20)
        token = wait_until(lambda: elector.token, timeout=10, message="a token")
        assert token is not None
        fail_next.set()
        proxy.reset()  # the connection drops; kazoo reconnects on the same session
        assert elector.wait_for(lambda h: "resumed, epoch 1" in h, timeout=20), elector.history
        assert not any("epoch 2" in h for h in elector.history), elector.history
        assert any("checking the term after reconnecting failed" in h for h in elector.history)
        assert zk_client.exists(token.lock_node) is not None
        wait_until(elector.is_leader, timeout=10, message="leading again")
    finally:
        elector.stop()
        client.stop()
        client.close()
        proxy.stop()
