"""Defects on the failover path found by reading (issue 28), each pinned by a test that
failed before its fix: the elector's callbacks and lock after errors, a bounded release,
the client's backoff."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient

from cluster.paths import Paths
from leader.elector import Elector
from leader.settings import ElectorCallbacks, ElectorSettings
from nimbus.client import NimbusClient, NoLeaderError, backoff_cap
from nimbus.discovery import Retry as _Retry
from tests.waiting import wait_until

ROOT = "/storm"
PATHS = Paths(ROOT)


def test_the_client_backoff_survives_a_thousand_attempts() -> None:
    """``0.05 * 2**n`` raised OverflowError at n = 1024 instead of the client's own error."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += max(seconds, 1e-6)

    def attempt(end: float) -> None:
        raise _Retry("no answer")

    client = NimbusClient(["127.0.0.1:1"], attempts=1100, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(NoLeaderError):
        client._retrying(1e9, attempt)
    assert backoff_cap(10**6, 1.0) == 1.0 and backoff_cap(0, 1.0) == 0.05


def _elector(client: KazooClient, gate: object, **kwargs: object) -> Elector:
    settings = ElectorSettings(
        paths=PATHS, replica_id="me:1", session_timeout=4.0, gate_poll_interval=0.05
    )
    return Elector(client, settings, ElectorCallbacks(has_all_code=gate, **kwargs))  # type: ignore[arg-type]


def test_a_failing_on_elected_still_runs_on_deposed(zk_client: KazooClient) -> None:
    """It raised out of the term: the token was cancelled but ``on_deposed`` never ran, so
    the daemon's signs of the term (role, pod label, metrics, writer) said leader."""
    deposed: list[str] = []

    def on_elected(*_: object) -> None:
        raise RuntimeError("a duty could not start")

    for folder in PATHS.folders():
        zk_client.ensure_path(folder)
    elector = _elector(zk_client, lambda: True, on_elected=on_elected, on_deposed=deposed.append)
    elector.start()
    try:
        wait_until(lambda: deposed, timeout=10, message="on_deposed after the failed start")
        assert "elector error" in deposed[0] and "a duty could not start" in deposed[0]
        assert not elector.is_leader()
    finally:
        elector.stop()


def test_a_take_office_conflict_leaves_the_queue(zk_client: KazooClient) -> None:
    """``WriteConflictError`` (here: no ``/epochs`` folder) escaped ``_office`` with the lock
    held; the next cycle waited for code *before* dropping the node, so every replica
    behind it waited too."""
    calls = [0]

    def gate() -> bool:
        calls[0] += 1
        return calls[0] <= 2  # passes before queueing and after winning, then not

    zk_client.ensure_path(PATHS.leader_lock)  # but no /epochs: take-office cannot create
    elector = _elector(zk_client, gate)
    elector.start()
    try:
        assert elector.wait_for(lambda h: any("could not take office" in s for s in h), 10)
        wait_until(
            lambda: zk_client.get_children(PATHS.leader_lock) == [],
            timeout=5,
            message="the lock node released",
        )
        assert elector.wait_for(lambda h: "waiting for code (before queueing)" in h, 10)
        assert zk_client.get_children(PATHS.leader_lock) == []
    finally:
        elector.stop()


def test_stop_returns_while_zookeeper_is_unreachable(zk_server: object, zk_hosts: str) -> None:
    """kazoo's ``Lock.release`` retries without bound while the link is down: a SIGTERM
    that came just as ZooKeeper went silent hung the hand-over for good."""
    from cluster.factory import make_kazoo_client
    from devtools.faultproxy import FaultProxy

    host, port = zk_server.connect_string.split(",")[0].split(":")  # type: ignore[attr-defined]
    chroot = zk_hosts[zk_hosts.index("/") :]
    proxy = FaultProxy(host, int(port)).start()
    client = make_kazoo_client(f"{proxy.address}{chroot}", session_timeout=4.0)
    client.start(timeout=30)
    for folder in PATHS.folders():
        client.ensure_path(folder)
    serving = threading.Event()
    elector = _elector(client, lambda: True, on_elected=lambda *_: serving.set())
    try:
        elector.start()
        assert serving.wait(10), elector.history
        proxy.blackhole()
        stopper = threading.Thread(target=elector.stop, daemon=True)
        started = time.monotonic()
        stopper.start()
        stopper.join(15)
        assert not stopper.is_alive(), "Elector.stop hung on an unreachable ZooKeeper"
        assert time.monotonic() - started < 10
    finally:
        proxy.pass_through()
        client.stop()
        client.close()
        proxy.stop()
