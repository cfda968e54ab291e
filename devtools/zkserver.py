"""Real ZooKeeper servers (standalone or an ensemble) on loopback, for tests and local runs.

Tests of leader election and fencing are only worth something against the real server:
its session expiry, quorum loss and leader election are the behaviour under test. So this
module starts actual ``QuorumPeerMain`` JVMs on free loopback ports, with data in a temp
folder, and offers fault helpers (kill, pause, restart) that act on the real processes.

Jars are found without internet access, in this order: ``$ZOOKEEPER_HOME``, the jars the
pyspark wheel ships (ZooKeeper 3.9 and its dependencies), Debian's ``zookeeper`` package.

No orphans: every JVM gets ``PR_SET_PDEATHSIG=SIGKILL`` (Linux), so it dies with us even on
``kill -9``; an ``atexit`` hook stops it cleanly on a normal exit. PDEATHSIG fires when the
*thread* that forked the child exits, not the process; so every JVM is forked by one
long-lived daemon thread (:class:`_Spawner`), which lives exactly as long as the process.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from cluster.errors import (
    JavaNotFoundError,
    ZooKeeperNotFoundError,
    ZooKeeperStartError,
    ZooKeeperUnavailableError,
)

EXTERNAL_ENV: Final = "NIMBUS_TEST_ZOOKEEPER"
MAIN_CLASS: Final = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
JAVA_INSTALL_HINT: Final = (
    "install a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
)
JVM_FLAGS: Final = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    # A paused peer must not stall leader election for the default 5 s.
    "-Dzookeeper.cnxTimeout=1000",
    # After a partition heals, election notifications back off up to 60 s by default: a
    # server cut from its peers would rejoin a minute late. Two seconds at most.
    "-Dzookeeper.fastleader.maxNotificationInterval=2000",
    "-Dzookeeper.jmx.log4j.disable=true",
    # For distributions with their own log4j 1 configuration ($ZOOKEEPER_HOME/conf).
    "-Dzookeeper.root.logger=WARN,CONSOLE",
    "-Dlog4j2.statusLoggerLevel=WARN",
)
SERVING_MODES: Final = frozenset({"standalone", "leader", "follower", "observer"})
_LOG_TAIL_LINES: Final = 40
_STOP_GRACE_S: Final = 5.0
# Jar name prefixes ZooKeeper needs from Debian's shared /usr/share/java.
_DEBIAN_JAR_PREFIXES: Final = (
    "zookeeper",
    "netty",
    "slf4j",
    "log4j",
    "logback",
    "jline",
    "commons-cli",
    "commons-io",
    "audience-annotations",
    "metrics-core",
    "snappy",
)

_LOG4J2_CONFIG: Final = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
"""

_LOGBACK_CONFIG: Final = """\
<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{0}: %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="CONSOLE"/></root>
</configuration>
"""


# --------------------------------------------------------------------------- discovery


def external_connect_string(env: Mapping[str, str] | None = None) -> str | None:
    """The connect string of an ensemble someone else runs (``$NIMBUS_TEST_ZOOKEEPER``).

    Lets CI or a developer point the tests at an existing ensemble instead of starting JVMs.
    """
    value = (os.environ if env is None else env).get(EXTERNAL_ENV, "").strip()
    return value or None


def find_java(env: Mapping[str, str] | None = None) -> str:
    """Path of the ``java`` to run: ``$JAVA_HOME/bin/java``, else ``java`` on ``$PATH``.

    ``env`` is injectable so that "no Java installed" is testable without touching the host.
    """
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java", path=env.get("PATH", ""))
    if found is None:
        where = f"JAVA_HOME={java_home!r} has no bin/java and " if java_home else ""
        raise JavaNotFoundError(
            f"ZooKeeper needs Java, but {where}no `java` is on PATH: {JAVA_INSTALL_HINT}"
        )
    return found


def _jars(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jar")) if directory.is_dir() else []


def _has_zookeeper_jar(jars: Iterable[Path]) -> bool:
    return any(j.name == "zookeeper.jar" or j.name.startswith("zookeeper-3") for j in jars)


def _pyspark_jars_dir() -> Path | None:
    # find_spec does not import pyspark (which is slow): it only locates the package.
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "jars"


def find_zookeeper_classpath(env: Mapping[str, str] | None = None) -> str:
    """A Java classpath holding ZooKeeper and its dependencies, found offline.

    Order: ``$ZOOKEEPER_HOME`` (its ``lib/*.jar`` and ``*.jar``), the pyspark wheel's
    ``jars/`` folder, Debian's ``zookeeper`` package. An explicit ``ZOOKEEPER_HOME`` without
    jars is an error rather than a silent fallback: the user asked for that one.
    """
    env = os.environ if env is None else env
    home = env.get("ZOOKEEPER_HOME")
    if home:
        root = Path(home)
        if not _has_zookeeper_jar(_jars(root / "lib") + _jars(root)):
            raise ZooKeeperNotFoundError(f"ZOOKEEPER_HOME={home!r} holds no zookeeper-*.jar")
        parts = [str(root / "lib" / "*"), str(root / "*")]
        conf = root / "conf"
        if conf.is_dir():
            parts.insert(0, str(conf))
        return os.pathsep.join(parts)
    spark_jars = _pyspark_jars_dir()
    if spark_jars is not None and _has_zookeeper_jar(_jars(spark_jars)):
        return str(spark_jars / "*")
    debian = _jars(Path("/usr/share/zookeeper")) + _jars(Path("/usr/share/zookeeper/lib"))
    shared = [j for j in _jars(Path("/usr/share/java")) if j.name.startswith(_DEBIAN_JAR_PREFIXES)]
    if _has_zookeeper_jar(debian + shared):
        return os.pathsep.join(str(j) for j in debian + shared)
    raise ZooKeeperNotFoundError(
        "no ZooKeeper jars found: install pyspark (its wheel ships them), set ZOOKEEPER_HOME "
        "to an unpacked ZooKeeper release, or `apt-get install zookeeper`"
    )


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports the kernel just handed out.

    They are released before the server binds them, so another process may grab one in
    between; :meth:`ZooKeeperCluster.start` retries once with fresh ports on a bind failure.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _check_port_free(port: int) -> None:
    """Fail fast, with a clear message, when a port the user chose is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZooKeeper binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ZooKeeperStartError(f"cannot use port {port} on 127.0.0.1: {exc}") from exc


def srvr(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> str | None:
    """The answer to the ``srvr`` four-letter word, or None if the node does not answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            chunks: list[bytes] = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None


def server_mode(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> str | None:
    """'leader', 'follower', 'standalone' (or 'observer') while the node serves, else None.

    This, not an open port, is readiness: the JVM binds the client port well before the
    server inside serves, and keeps it bound when the server inside has failed.
    """
    answer = srvr(port, host, timeout)
    if answer is None:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            mode = line.partition(":")[2].strip()
            return mode if mode in SERVING_MODES else None
    return None


# --------------------------------------------------------------------------- processes


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child get SIGKILL when its parent thread dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class _Spawner:
    """Forks every JVM from one daemon thread that lives as long as the process.

    PR_SET_PDEATHSIG is tied to the forking *thread*: a JVM started from a short-lived
    worker thread would be killed when that thread ends. A daemon thread ends only when
    the process does, which is exactly when the JVMs should die.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def spawn(self, make: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            # After a fork the old thread does not exist in the child: start a new one.
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="zookeeper-spawner", daemon=True
                )
                self._thread.start()
        done: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((make, done))
        return done.result()

    def _run(self) -> None:
        while True:
            make, done = self._jobs.get()
            try:
                done.set_result(make())
            except BaseException as exc:
                done.set_exception(exc)


_SPAWNER: Final = _Spawner()
_LIVE: set[ZooKeeperCluster] = set()
_LIVE_LOCK: Final = threading.Lock()


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        clusters = list(_LIVE)
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.stop()


atexit.register(_stop_all_at_exit)


@dataclass
class _Node:
    index: int
    client_port: int
    peer_port: int
    election_port: int
    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def myid(self) -> int:
        return self.index + 1

    @property
    def cfg_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except OSError:
            return "(no log)"
        tail = text.splitlines()[-lines:]
        return "\n".join(tail) if tail else "(empty log)"


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped ('T'); True where /proc is missing."""
    task_dir = Path(f"/proc/{pid}/task")
    if not task_dir.is_dir():
        return True
    for stat in task_dir.glob("*/stat"):
        try:
            state = stat.read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue  # the thread exited meanwhile
        if state not in ("T", "t"):
            return False
    return True


def _bind_failed(node: _Node) -> bool:
    tail = node.log_tail(200)
    return "Address already in use" in tail or "BindException" in tail


# --------------------------------------------------------------------------- the cluster


class ZooKeeperCluster:
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
    ) -> None:
        """Describe the cluster; nothing starts before :meth:`start`.

        ``tick_ms`` defaults to 200 so that 2 s sessions are allowed (the minimum session is
        two ticks). ``base_dir`` keeps the data after :meth:`stop` (a temp dir is removed).
        ``force_sync=False`` skips fsync: test data is thrown away and fsync dominates write
        latency on slow disks. ``env`` (default ``os.environ``) is where ``JAVA_HOME``,
        ``PATH`` and ``ZOOKEEPER_HOME`` are looked up, and the JVMs' environment.
        ``client_address`` is where client ports listen: ``0.0.0.0`` in a container, for
        clients in other containers (the connect string still names loopback).
        """
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        self._size = size
        self._tick_ms = tick_ms
        self._min_session_ms = min_session_timeout_ms or 2 * tick_ms
        self._max_session_ms = max_session_timeout_ms
        if self._min_session_ms > self._max_session_ms:
            raise ValueError("min_session_timeout_ms exceeds max_session_timeout_ms")
        self._base_dir_arg = base_dir
        self._first_client_port = first_client_port
        self._force_sync = force_sync
        self._start_timeout = start_timeout
        self._env = dict(os.environ if env is None else env)
        self._client_address = client_address
        self._base_dir: Path | None = None
        self._owns_base_dir = False
        self._nodes: list[_Node] = []
        self._java = ""
        self._classpath = ""
        self._lock = threading.RLock()

    # ---- context manager

    def __enter__(self) -> ZooKeeperCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- description

    @property
    def size(self) -> int:
        return self._size

    @property
    def tick_ms(self) -> int:
        return self._tick_ms

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
            with _LIVE_LOCK:
                _LIVE.add(self)
            try:
                try:
                    self._start_once()
                except _BindFailure:
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
            with _LIVE_LOCK:
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
        while not _all_threads_stopped(node.proc.pid):
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
            self._wait_serving([node], time.monotonic() + (timeout or self._start_timeout))

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
        error = _probe_write(self.connect_string, deadline)
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

    def _node(self, i: int) -> _Node:
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
        (self._base_dir / "log4j2.properties").write_text(_LOG4J2_CONFIG)
        (self._base_dir / "logback.xml").write_text(_LOGBACK_CONFIG)

    def _start_once(self) -> None:
        self._nodes = self._plan_nodes()
        for node in self._nodes:
            self._write_config(node)
        for node in self._nodes:
            self._spawn(node)
        deadline = time.monotonic() + self._start_timeout
        self._wait_serving(self._nodes, deadline)
        error = _probe_write(self.connect_string, deadline)
        if error is not None:
            raise ZooKeeperStartError(
                f"ZooKeeper on {self.connect_string} serves but no write succeeded within "
                f"{self._start_timeout:.0f} s: {error}\n{self._log_tails()}"
            )

    def _plan_nodes(self) -> list[_Node]:
        assert self._base_dir is not None
        ports = free_ports(3 * self._size)
        if self._first_client_port is not None:
            _check_port_free(self._first_client_port)
            ports = [p for p in ports if p != self._first_client_port]
            ports.insert(0, self._first_client_port)
        nodes = []
        for i in range(self._size):
            data_dir = self._base_dir / f"node{i + 1}"
            data_dir.mkdir(parents=True, exist_ok=True)
            nodes.append(
                _Node(
                    index=i,
                    client_port=ports[i],
                    peer_port=ports[self._size + 2 * i],
                    election_port=ports[self._size + 2 * i + 1],
                    data_dir=data_dir,
                )
            )
        return nodes

    def _write_config(self, node: _Node) -> None:
        tick = self._tick_ms
        lines = [
            f"tickTime={tick}",
            f"dataDir={node.data_dir}",
            f"clientPort={node.client_port}",
            f"clientPortAddress={self._client_address}",
            f"minSessionTimeout={self._min_session_ms}",
            f"maxSessionTimeout={self._max_session_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            # Unknown keys become zookeeper.* system properties: 1 MiB log preallocation
            # instead of 64 MiB per data dir.
            "preAllocSize=1024",
            f"forceSync={'yes' if self._force_sync else 'no'}",
            "maxClientCnxns=0",
            "maxCnxns=0",
            # Every queued replica beats five times a second: without a purge, snapshots
            # and transaction logs would fill the disk. Hourly, keeping the newest three.
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        if self._size > 1:
            lines += [
                # About 10 s to join, whatever the tick.
                f"initLimit={max(10, -(-10_000 // tick))}",
                # A follower out of touch with its leader for 3 s leaves the quorum and
                # resyncs, instead of serving a view that falls behind for longer.
                f"syncLimit={max(3, -(-3_000 // tick))}",
                # Send to the leader from a thread of its own, so a follower stuck writing
                # to a slow leader cannot hang and serve stale reads (ZOOKEEPER-4074).
                "learner.asyncSending=true",
                # Compare each follower's data tree digest with the leader's: a server
                # whose tree diverged (stale ephemerals, ZOOKEEPER-5010) says so in its log.
                "digest.enabled=true",
                "standaloneEnabled=false",
                "reconfigEnabled=false",
            ]
            lines += [
                f"server.{n.myid}=127.0.0.1:{n.peer_port}:{n.election_port}" for n in self._nodes
            ]
            (node.data_dir / "myid").write_text(f"{node.myid}\n")
        node.cfg_path.write_text("\n".join(lines) + "\n")

    def _command(self, node: _Node) -> list[str]:
        assert self._base_dir is not None
        return [
            self._java,
            *JVM_FLAGS,
            f"-Dlog4j2.configurationFile={self._base_dir / 'log4j2.properties'}",
            f"-Dlogback.configurationFile={self._base_dir / 'logback.xml'}",
            f"-Dzookeeper.log.dir={node.data_dir}",
            "-cp",
            self._classpath,
            MAIN_CLASS,
            str(node.cfg_path),
        ]

    def _spawn(self, node: _Node) -> None:
        command = self._command(node)
        env = self._env
        # ``setpriv --pdeathsig`` when there is one: a ``preexec_fn`` runs Python in the
        # forked child, which aborts now and then in a process with gRPC threads (seen:
        # "Fatal Python error: Aborted" in the child, the ZooKeeper node never started).
        setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
        if setpriv is not None:
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
            preexec = None
        else:
            preexec = _pdeathsig_preexec()

        def make() -> subprocess.Popen[bytes]:
            with open(node.log_path, "ab") as log:
                # start_new_session: Ctrl-C in a terminal signals the whole foreground
                # process group; the JVMs must wait for our clean stop instead.
                return subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=node.data_dir,
                    start_new_session=True,
                    preexec_fn=preexec,  # see the module docstring
                )

        node.proc = _SPAWNER.spawn(make)
        node.paused = False

    def _wait_serving(self, nodes: list[_Node], deadline: float) -> None:
        waiting = list(nodes)
        while waiting:
            for node in list(waiting):
                if not node.alive():
                    code = node.proc.returncode if node.proc is not None else None
                    if _bind_failed(node):
                        raise _BindFailure(node)
                    raise ZooKeeperStartError(
                        f"ZooKeeper node {node.index} (port {node.client_port}) exited with "
                        f"code {code} while starting; log {node.log_path}:\n{node.log_tail()}"
                    )
                if server_mode(node.client_port, timeout=1.0) is not None:
                    waiting.remove(node)
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise ZooKeeperStartError(
                    "ZooKeeper did not start serving in time (no Mode in `srvr`) on node(s) "
                    f"{[n.index for n in waiting]}\n{self._log_tails(waiting)}"
                )
            time.sleep(0.05)  # poll the condition; the JVM offers nothing to wait on

    def _kill_all(self) -> None:
        for node in self._nodes:
            if node.proc is not None and node.alive():
                node.proc.kill()
                node.proc.wait()
            node.proc = None

    def _log_tails(self, nodes: list[_Node] | None = None) -> str:
        return "\n".join(
            f"--- node {n.index} log ({n.log_path}):\n{n.log_tail()}"
            for n in (self._nodes if nodes is None else nodes)
        )


class _BindFailure(ZooKeeperStartError):
    """A node could not bind one of its ports (taken after we probed it)."""

    def __init__(self, node: _Node) -> None:
        super().__init__(
            f"ZooKeeper node {node.index} could not bind its ports (client {node.client_port}, "
            f"peer {node.peer_port}, election {node.election_port}): another process holds "
            f"one; log {node.log_path}:\n{node.log_tail()}"
        )


def _probe_write(connect_string: str, deadline: float) -> str | None:
    """Create and delete a scratch ephemeral node through a real client; None on success.

    A write is the only proof of a quorum: a node can answer ``srvr`` as a follower
    while the ensemble cannot commit anything.
    """
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from cluster.factory import make_kazoo_client
    from fencing.errors import FencingError
    from fencing.membership import probe_write

    last_error = "no attempt"
    client = make_kazoo_client(connect_string, session_timeout=10.0)
    started = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return last_error
            try:
                if not started:
                    client.start(timeout=remaining)
                    started = True
                elif not client.connected:  # kazoo reconnects by itself; poll for it
                    time.sleep(0.05)
                    continue
                # Through fencing/, the only writer: a scratch create+delete multi-op.
                probe_write(client, timeout=max(0.5, min(remaining, 5.0)))
                return None
            except (KazooException, KazooTimeoutError, FencingError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.05)
    finally:
        with contextlib.suppress(Exception):
            client.stop()
        with contextlib.suppress(Exception):
            client.close()
