"""ZooKeeper fixtures: real servers started once per session, a chroot per test.

``zk_server`` (standalone) and ``zk_ensemble`` (3 nodes) are session scoped: a JVM takes
a second or two to start. Every test gets its own chroot (``zk_hosts``) so tests cannot
see each other's nodes. With ``NIMBUS_TEST_ZOOKEEPER=host:port,...`` the fixtures use that
ensemble instead, and tests that kill or pause nodes are skipped.
"""

from __future__ import annotations

import re
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

from cluster.factory import make_kazoo_client
from devtools.zkserver import EXTERNAL_ENV, ZooKeeperCluster, external_connect_string
from tests.tiers import needs
from tests.waiting import wait_until

SESSION_TIMEOUT = 2.0


class ExternalZooKeeper(ZooKeeperCluster):
    """An ensemble someone else runs: tests connect to it; fault helpers skip the test."""

    def __init__(self, connect_string: str) -> None:
        self._hosts = connect_string.split("/", 1)[0].split(",")
        super().__init__(size=len(self._hosts))
        self._external = connect_string

    @property
    def connect_string(self) -> str:
        return self._external

    @property
    def client_ports(self) -> list[int]:
        return [int(h.rpartition(":")[2]) for h in self._hosts]

    def node_connect_string(self, i: int) -> str:
        return self._hosts[i]

    def start(self) -> ZooKeeperCluster:
        self.wait_quorum(30.0)
        return self

    def stop(self) -> None:
        pass

    def heal(self, timeout: float = 60.0) -> None:
        self.wait_quorum(timeout)

    def _skip(self) -> NoReturn:
        pytest.skip(
            f"needs ZooKeeper processes started by the tests; {EXTERNAL_ENV} points at an "
            "external ensemble, which the tests may not kill or pause"
        )

    def kill(self, i: int) -> None:
        self._skip()

    def pause(self, i: int) -> None:
        self._skip()

    def resume(self, i: int) -> None:
        self._skip()

    def restart(self, i: int, timeout: float | None = None) -> None:
        self._skip()

    def node_mode(self, i: int, timeout: float = 1.0) -> str | None:
        self._skip()

    def leader_index(self) -> int | None:
        self._skip()

    def is_alive(self, i: int) -> bool:
        self._skip()

    def pids(self) -> list[int]:
        self._skip()


def _terminate_as_interrupt() -> None:
    """Make SIGTERM unwind like Ctrl-C, so pytest tears fixtures down and stops the JVMs."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def _session_cluster(size: int) -> Iterator[ZooKeeperCluster]:
    external = external_connect_string()
    cluster = ExternalZooKeeper(external) if external else ZooKeeperCluster(size=size)
    _terminate_as_interrupt()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()  # also on Ctrl-C; kill -9 is covered by PDEATHSIG in zkserver


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperCluster]:
    """A standalone ZooKeeper for the whole session (tick 200 ms: 2 s sessions work)."""
    yield from _session_cluster(1)


@pytest.fixture(scope="session")
@needs("ensemble")
def zk_ensemble() -> Iterator[ZooKeeperCluster]:
    """A 3-node ensemble for the whole session; prefer ``healthy_ensemble`` in tests."""
    yield from _session_cluster(3)


@pytest.fixture
def healthy_ensemble(zk_ensemble: ZooKeeperCluster) -> Iterator[ZooKeeperCluster]:
    """The session ensemble, all nodes up; whatever the test kills or pauses is restored."""
    zk_ensemble.heal()
    yield zk_ensemble
    zk_ensemble.heal()


@contextmanager
def kazoo_session(hosts: str, session_timeout: float = SESSION_TIMEOUT) -> Iterator[KazooClient]:
    """A started ``make_kazoo_client`` on ``hosts``, stopped and closed after the block."""
    client = make_kazoo_client(hosts, session_timeout=session_timeout)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def zk_admin(zk_server: ZooKeeperCluster) -> Iterator[KazooClient]:
    """A plain client on the server root, for fixtures' setup and cleanup only."""
    with kazoo_session(zk_server.connect_string, session_timeout=10.0) as client:
        yield client


@pytest.fixture
def zk_hosts(
    zk_server: ZooKeeperCluster, zk_admin: KazooClient, request: pytest.FixtureRequest
) -> Iterator[str]:
    """``host:port,.../<chroot>``: a fresh, empty chroot on ``zk_server`` for this test."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    chroot = f"/t-{name}-{uuid.uuid4().hex[:8]}"
    zk_admin.create(chroot, b"")
    yield f"{zk_server.connect_string}{chroot}"

    def removed() -> bool:
        try:
            zk_admin.delete(chroot, recursive=True)
        except NoNodeError:
            return True
        except NotEmptyError:  # an ephemeral of a session still closing was added
            return False
        return True

    wait_until(removed, timeout=10, message=f"removal of {chroot}")


@pytest.fixture
def zk_client(zk_hosts: str) -> Iterator[KazooClient]:
    """A started client (2 s session) rooted at this test's chroot."""
    with kazoo_session(zk_hosts) as client:
        yield client
