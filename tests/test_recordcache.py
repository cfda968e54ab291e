"""The watch-fed record cache across a dropped connection (same session), on a real ZooKeeper."""

from __future__ import annotations

import threading

from kazoo.client import KazooClient, KazooState
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from cluster.api import records
from cluster.factory import make_kazoo_client
from cluster.recordcache import RecordCache
from devtools.faultproxy import FaultProxy
from devtools.zkserver import ZooKeeperCluster
from tests.waiting import wait_until

FOLDER = "/storms"


def storm(name: str, *, active: bool = True) -> bytes:
    status = records.ACTIVE if active else records.INACTIVE
    return records.StormBase(name=name, status=status).SerializeToString()


def test_changes_made_after_a_reconnect_reach_the_cache(
    zk_server: ZooKeeperCluster, zk_hosts: str, zk_client: KazooClient
) -> None:
    """kazoo drops every watch when the connection goes and does not restore it, even
    when the session survives; a cache that reloaded only after a new session went
    stale for good after any blip (a leader would then miss new topologies)."""
    host, port = zk_server.connect_string.split(",")[0].split(":")
    chroot = zk_hosts[zk_hosts.index("/") :]
    zk_client.ensure_path(FOLDER)
    zk_client.create(f"{FOLDER}/a-1-1", storm("a"))
    # More records than kazoo's wake-up socket holds (~280 on this machine): a reload
    # sent from kazoo's connection thread would block that thread for good.
    fillers = {f"f-{i}-1" for i in range(600)}
    for result in [zk_client.create_async(f"{FOLDER}/{n}", storm("f")) for n in fillers]:
        result.get(timeout=30)
    with FaultProxy(host, int(port)) as proxy:
        client = make_kazoo_client(f"{proxy.address}{chroot}", session_timeout=10.0)
        client.start(timeout=10)
        reconnected = threading.Event()
        suspended = threading.Event()

        def on_state(state: str) -> bool:
            if state == KazooState.SUSPENDED:
                suspended.set()
            elif state == KazooState.CONNECTED and suspended.is_set():
                reconnected.set()
            return False

        try:
            cache = RecordCache(client, FOLDER, records.StormBase.FromString)
            cache.start()
            assert cache.wait_loaded(10)
            wait_until(lambda: cache.get("a-1-1") is not None, timeout=10)
            session = client.client_id[0]
            client.add_listener(on_state)
            proxy.reset()  # the connection drops; the client reconnects at once
            assert reconnected.wait(20), "the client did not come back"
            assert client.client_id[0] == session, "the same session must survive"
            # Changes made after the blip, by someone else.
            zk_client.set(f"{FOLDER}/a-1-1", storm("a", active=False))
            zk_client.create(f"{FOLDER}/b-2-2", storm("b"))
            wait_until(lambda: cache.get("b-2-2") is not None, timeout=10, message="new record")

            def a_inactive() -> bool:
                a = cache.get("a-1-1")
                return a is not None and a.status == records.INACTIVE

            wait_until(a_inactive, timeout=10, message="the changed record")
            # And the watches are armed again: a second change also arrives.
            zk_client.delete(f"{FOLDER}/b-2-2")
            wait_until(
                lambda: cache.names() == {"a-1-1", *fillers}, timeout=10, message="a removal"
            )
            assert cache.get("b-2-2") is None
            wait_until(
                lambda: cache.snapshot().records_read, timeout=10, message="every record read"
            )
        finally:
            client.stop()
            client.close()


def test_a_listing_refused_while_connected_is_tried_again(
    zk_hosts: str, zk_client: KazooClient
) -> None:
    """A listing that fails while the connection stays up (here ZooKeeper refuses it: the
    folder's ACL) is tried again after a backoff; it used to wait for a reconnect that
    never came, and the cache's view stayed frozen."""
    zk_client.add_auth("digest", "admin:secret")
    admin_only = [make_digest_acl("admin", "secret", all=True)]
    zk_client.create(FOLDER, b"", acl=admin_only)
    zk_client.create(f"{FOLDER}/a-1-1", storm("a"), acl=admin_only)
    client = make_kazoo_client(zk_hosts, session_timeout=10.0)
    client.start(timeout=10)
    try:
        cache = RecordCache(client, FOLDER, records.StormBase.FromString)
        cache.start()
        assert cache.wait_loaded(1) is False, "nothing listed while refused"
        session = client.client_id[0]
        zk_client.set_acls(FOLDER, OPEN_ACL_UNSAFE)
        zk_client.set_acls(f"{FOLDER}/a-1-1", OPEN_ACL_UNSAFE)
        wait_until(lambda: cache.get("a-1-1") is not None, timeout=15,
                   message="the record, listed again without a reconnect")  # fmt: skip
        assert client.client_id[0] == session and client.state == KazooState.CONNECTED
    finally:
        client.stop()
        client.close()
