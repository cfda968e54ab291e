"""Real ZooKeeper servers (standalone or an ensemble) on loopback, for tests and local runs.

Tests of leader election and fencing are only worth something against the real server:
its session expiry, quorum loss and leader election are the behaviour under test. So this
module starts actual ``QuorumPeerMain`` JVMs on free loopback ports, with data in a temp
folder, and offers fault helpers (kill, pause, restart) that act on the real processes.

Invariant: no JVM outlives us. Each is spawned to die with this process
(``devtools.zkspawn``), and an ``atexit`` hook stops every started cluster on a normal
exit. Finding Java, the jars and free ports is ``devtools.zklocate``; the names other
code imports (``find_java``, ``free_ports``, ``srvr``, ...) stay importable from here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cluster.errors import ZooKeeperStartError, ZooKeeperUnavailableError
from devtools.lifetime import Started, StopAtExit
from devtools.zklocate import (
    EXTERNAL_ENV,
    JAVA_INSTALL_HINT,
    SERVING_MODES,
    check_port_free,
    external_connect_string,
    find_java,
    find_zookeeper_classpath,
    free_ports,
    server_mode,
    srvr,
    wait_writable,
)
from devtools.zkspawn import (
    JVM_FLAGS,
    MAIN_CLASS,
    BindFailure,
    Node,
    ServerSettings,
    all_threads_stopped,
    jvm_command,
    log_tails,
    spawn,
    wait_serving,
    write_config,
    write_log_configs,
)

__all__ = [
    "EXTERNAL_ENV",
    "JAVA_INSTALL_HINT",
    "JVM_FLAGS",
    "MAIN_CLASS",
    "SERVING_MODES",
    "ZooKeeperCluster",
    "external_connect_string",
    "find_java",
    "find_zookeeper_classpath",
    "free_ports",
    "server_mode",
    "srvr",
]

_STOP_GRACE_S: Final = 5.0
_LIVE: Final = StopAtExit()


class ZooKeeperCluster(Started):
    """One standalone ZooKeeper or an ensemble of ``size`` nodes, as real local JVMs.

    Node indexes are 0-based (``myid`` is index + 1). Use as a context manager, or call
    :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        size: int = 1,
        tick_ms: int = 200,
        max_session_timeout_ms: int = 60_000,
        base_dir: Path | None = None,
        *,
        first_client_port: int | None = None,
        min_session_timeout_ms: int | None = None,
        force_sync: bool = False,
        start_timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        client_address: str = "127.0.0.1",
        extra_config: tuple[str, ...] = (),
    ) -> None:
        """Describe the cluster; nothing starts before :meth:`start`.

        ``tick_ms`` defaults to 200 so that 2 s sessions are allowed (the minimum session is
        two ticks). ``base_dir`` keeps the data after :meth:`stop` (a temp dir is removed).
        ``force_sync=False`` skips fsync: test data is thrown away and fsync dominates write
        latency on slow disks. ``env`` (default ``os.environ``) is where ``JAVA_HOME``,
        ``PATH`` and ``ZOOKEEPER_HOME`` are looked up, and the JVMs' environment.
        ``client_address`` is where client ports listen: ``0.0.0.0`` in a container, for
        clients in other containers (the connect string still names loopback).
        ``extra_config``: ``key=value`` lines that override the project's settings.
        """
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        min_session_ms = min_session_timeout_ms or 2 * tick_ms
        if min_session_ms > max_session_timeout_ms:
            raise ValueError("min_session_timeout_ms exceeds max_session_timeout_ms")
        self._size = size
        self._settings = ServerSettings(
            tick_ms, min_session_ms, max_session_timeout_ms, force_sync, client_address,
            tuple(extra_config),
        )  # fmt: skip
        self._base_dir_arg = base_dir
        self._first_client_port = first_client_port
        self._start_timeout = start_timeout
        self._env = dict(os.environ if env is None else env)
        self._base_dir: Path | None = None
        self._owns_base_dir = False
        self._nodes: list[Node] = []
        self._java = ""
        self._classpath = ""
        self._lock = threading.RLock()

    # ---- description

    @property
    def size(self) -> int:
        return self._size

    @property
    def tick_ms(self) -> int:
        return self._settings.tick_ms

    @property
    def client_ports(self) -> list[int]:
        """Client port of every node, by index."""
        return [n.client_port for n in self._nodes]

    def quorum_ports(self, i: int) -> list[int]:
        """Node ``i``'s quorum (peer) and election ports: its links to the other servers."""
        node = self._node(i)
        return [node.peer_port, node.election_port]

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...`` for KazooClient's ``hosts``."""
        if not self._nodes:
            raise ZooKeeperStartError("the cluster has not been started")
        return ",".join(f"127.0.0.1:{n.client_port}" for n in self._nodes)

    def node_connect_string(self, i: int) -> str:
        """``127.0.0.1:port`` of node ``i`` alone, to talk to one member."""
        return f"127.0.0.1:{self._node(i).client_port}"

    @property
    def classpath(self) -> str:
        """The Java classpath the servers run with (ZooKeeper's tools run with it too)."""
        if not self._classpath:
            self._classpath = find_zookeeper_classpath(self._env)
        return self._classpath

    @property
    def data_dir(self) -> Path:
        if self._base_dir is None:
            raise ZooKeeperStartError("the cluster has not been started")
        return self._base_dir

    def config_path(self, i: int) -> Path:
        """Node ``i``'s ``zoo.cfg``, as written at start."""
        return self._node(i).cfg_path

    def log_path(self, i: int) -> Path:
        """The file receiving node ``i``'s JVM output (WARN and above)."""
        return self._node(i).log_path

    # ---- lifecycle

    def start(self) -> ZooKeeperCluster:
        """Start every node and return once a client can write; idempotent."""
        with self._lock:
            if self._nodes:
                self.heal(self._start_timeout)
                return self
            self._java = find_java(self._env)
            self._classpath = find_zookeeper_classpath(self._env)
            self._prepare_base_dir()
            _LIVE.add(self)
            try:
                try:
                    self._start_once()
                except BindFailure:
                    # A free port was taken between probing and binding: once more, new ports.
                    self._kill_all()
                    self._start_once()
            except BaseException:
                self.stop()
                raise
            return self

    def stop(self) -> None:
        """SIGTERM every node, SIGKILL after a grace period, remove the temp dir; idempotent."""
        with self._lock:
            procs = [n.proc for n in self._nodes if n.proc is not None]
            for proc in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGTERM)
                        proc.send_signal(signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
            deadline = time.monotonic() + _STOP_GRACE_S
            for proc in procs:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self._nodes = []
            if self._owns_base_dir and self._base_dir is not None:
                shutil.rmtree(self._base_dir, ignore_errors=True)
                self._base_dir = None
                self._owns_base_dir = False
            _LIVE.discard(self)

    # ---- fault helpers (real processes, by node index)

    def pids(self) -> list[int]:
        """PIDs of the running JVMs, in node order."""
        return [n.proc.pid for n in self._nodes if n.proc is not None and n.alive()]

    def pid(self, i: int) -> int | None:
        node = self._node(i)
        return node.proc.pid if node.proc is not None and node.alive() else None

    def is_alive(self, i: int) -> bool:
        """Whether node ``i``'s JVM exists (a paused one counts as alive)."""
        return self._node(i).alive()

    def is_paused(self, i: int) -> bool:
        return self._node(i).paused and self.is_alive(i)

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` and reap it: a crash, no goodbye to peers or clients."""
        node = self._node(i)
        if node.proc is not None and node.alive():
            node.proc.kill()
            node.proc.wait()
        node.paused = False

    def pause(self, i: int) -> None:
        """SIGSTOP node ``i``: its sockets stay open but it says nothing (a long GC pause)."""
        node = self._node(i)
        if node.proc is None or not node.alive():
            raise ZooKeeperUnavailableError(f"node {i} is not running")
        node.proc.send_signal(signal.SIGSTOP)
        node.paused = True
        # kill() returns before every thread has stopped; a thread still running could
        # answer one more request. Return only once the whole JVM is frozen.
        deadline = time.monotonic() + 5.0
        while not all_threads_stopped(node.proc.pid):
            if time.monotonic() >= deadline:
                raise ZooKeeperUnavailableError(f"node {i} did not stop on SIGSTOP")
            time.sleep(0.005)

    def resume(self, i: int) -> None:
        """SIGCONT node ``i``."""
        node = self._node(i)
        if node.proc is not None and node.alive():
            node.proc.send_signal(signal.SIGCONT)
        node.paused = False

    def restart(self, i: int, timeout: float | None = None) -> None:
        """Start node ``i`` again on the same ports and data; return once it serves."""
        with self._lock:
            node = self._node(i)
            self.kill(i)
            self._spawn(node)
            wait_serving([node], time.monotonic() + (timeout or self._start_timeout))

    def node_mode(self, i: int, timeout: float = 1.0) -> str | None:
        """'leader', 'follower' or 'standalone' while node ``i`` serves, else None."""
        node = self._node(i)
        if not node.alive() or node.paused:
            return None
        return server_mode(node.client_port, timeout=timeout)

    def leader_index(self) -> int | None:
        """Index of the leader (of the standalone node), or None if there is none now."""
        for i in range(self._size):
            if self.node_mode(i) in ("leader", "standalone"):
                return i
        return None

    def wait_quorum(self, timeout: float = 30.0) -> None:
        """Return once a client can write; raise ZooKeeperUnavailableError after ``timeout``."""
        deadline = time.monotonic() + timeout
        error = wait_writable(self.connect_string, deadline)
        if error is not None:
            raise ZooKeeperUnavailableError(
                f"no write succeeded on {self.connect_string} within {timeout:.0f} s: {error}"
            )

    def heal(self, timeout: float = 60.0) -> None:
        """Resume paused nodes, restart dead ones; return once all serve and one leads.

        A resumed ex-leader goes on calling itself leader until it notices it has no
        followers, so a writable quorum alone is not "healed": every node must also
        serve, with exactly one leader.
        """
        deadline = time.monotonic() + timeout
        for i in range(self._size):
            if self.is_paused(i):
                self.resume(i)
        for i in range(self._size):
            if not self.is_alive(i):
                self.restart(i, timeout=max(1.0, deadline - time.monotonic()))
        self.wait_quorum(max(1.0, deadline - time.monotonic()))
        while True:
            modes = [self.node_mode(i) for i in range(self._size)]
            leaders = sum(m in ("leader", "standalone") for m in modes)
            if None not in modes and leaders == 1:
                return
            if time.monotonic() >= deadline:
                raise ZooKeeperUnavailableError(f"the nodes did not settle; modes: {modes}")
            time.sleep(0.05)

    # ---- internals

    def _node(self, i: int) -> Node:
        if not self._nodes:
            raise ZooKeeperStartError("the cluster has not been started")
        if not 0 <= i < len(self._nodes):
            raise IndexError(f"node index {i} out of range 0..{len(self._nodes) - 1}")
        return self._nodes[i]

    def _prepare_base_dir(self) -> None:
        if self._base_dir is not None:
            return
        if self._base_dir_arg is None:
            self._base_dir = Path(tempfile.mkdtemp(prefix="nimbus-zk-"))
            self._owns_base_dir = True
        else:
            self._base_dir = self._base_dir_arg
            self._base_dir.mkdir(parents=True, exist_ok=True)
        write_log_configs(self._base_dir)

    def _start_once(self) -> None:
        self._nodes = self._plan_nodes()
        for node in self._nodes:
            write_config(node, self._nodes, self._settings)
        for node in self._nodes:
            self._spawn(node)
        deadline = time.monotonic() + self._start_timeout
        wait_serving(self._nodes, deadline)
        error = wait_writable(self.connect_string, deadline)
        if error is not None:
            raise ZooKeeperStartError(
                f"ZooKeeper on {self.connect_string} serves but no write succeeded within "
                f"{self._start_timeout:.0f} s: {error}\n{log_tails(self._nodes)}"
            )

    def _plan_nodes(self) -> list[Node]:
        assert self._base_dir is not None
        ports = free_ports(3 * self._size)
        if self._first_client_port is not None:
            check_port_free(self._first_client_port)
            ports = [p for p in ports if p != self._first_client_port]
            ports.insert(0, self._first_client_port)
        nodes = []
        for i in range(self._size):
            data_dir = self._base_dir / f"node{i + 1}"
            data_dir.mkdir(parents=True, exist_ok=True)
            nodes.append(
                Node(
                    index=i,
                    client_port=ports[i],
                    peer_port=ports[self._size + 2 * i],
                    election_port=ports[self._size + 2 * i + 1],
                    data_dir=data_dir,
                )
            )
        return nodes

    def _spawn(self, node: Node) -> None:
        assert self._base_dir is not None
        spawn(node, jvm_command(self._java, self._classpath, self._base_dir, node), self._env)

    def _kill_all(self) -> None:
        for node in self._nodes:
            if node.proc is not None and node.alive():
                node.proc.kill()
                node.proc.wait()
            node.proc = None
