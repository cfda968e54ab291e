"""ZooKeeper server JVMs: their config file, their command, and a spawn that dies with us.

No orphans: every JVM gets ``PR_SET_PDEATHSIG=SIGKILL`` (Linux), so it dies with us even on
``kill -9``. PDEATHSIG fires when the *thread* that forked the child exits, not the
process; so every JVM is forked by one long-lived daemon thread (:class:`_Spawner`), which
lives exactly as long as the process. The ensemble (``devtools.zkserver``) decides which
nodes run; this module only writes, starts and waits for one node at a time.
"""

from __future__ import annotations

import ctypes
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cluster.errors import ZooKeeperStartError
from devtools.zklocate import server_mode

MAIN_CLASS: Final = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
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
_LOG_TAIL_LINES: Final = 40

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


def write_log_configs(base_dir: Path) -> None:
    """The log4j 2 and logback files every node's JVM is pointed at (WARN and above)."""
    (base_dir / "log4j2.properties").write_text(_LOG4J2_CONFIG)
    (base_dir / "logback.xml").write_text(_LOGBACK_CONFIG)


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


@dataclass
class Node:
    """One server of an ensemble: its ports, its data folder and, once spawned, its JVM."""

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


def all_threads_stopped(pid: int) -> bool:
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


def _bind_failed(node: Node) -> bool:
    tail = node.log_tail(200)
    return "Address already in use" in tail or "BindException" in tail


class BindFailure(ZooKeeperStartError):
    """A node could not bind one of its ports (taken after we probed it)."""

    def __init__(self, node: Node) -> None:
        super().__init__(
            f"ZooKeeper node {node.index} could not bind its ports (client {node.client_port}, "
            f"peer {node.peer_port}, election {node.election_port}): another process holds "
            f"one; log {node.log_path}:\n{node.log_tail()}"
        )


@dataclass(frozen=True)
class ServerSettings:
    """What every node of one ensemble is configured with (``zoo.cfg``)."""

    tick_ms: int
    min_session_ms: int
    max_session_ms: int
    force_sync: bool
    client_address: str
    #: ``key=value`` lines after the project's own, which they override (the last of a
    #: key wins): for a benchmark against ZooKeeper's defaults.
    extra: tuple[str, ...] = ()


def write_config(node: Node, ensemble: list[Node], settings: ServerSettings) -> None:
    """``node``'s ``zoo.cfg`` (and ``myid`` in an ensemble of more than one)."""
    tick = settings.tick_ms
    lines = [
        f"tickTime={tick}",
        f"dataDir={node.data_dir}",
        f"clientPort={node.client_port}",
        f"clientPortAddress={settings.client_address}",
        f"minSessionTimeout={settings.min_session_ms}",
        f"maxSessionTimeout={settings.max_session_ms}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=*",
        # Unknown keys become zookeeper.* system properties: 1 MiB log preallocation
        # instead of 64 MiB per data dir.
        "preAllocSize=1024",
        f"forceSync={'yes' if settings.force_sync else 'no'}",
        "maxClientCnxns=0",
        "maxCnxns=0",
        # Every queued replica beats five times a second: without a purge, snapshots
        # and transaction logs would fill the disk. Hourly, keeping the newest three.
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
    ]
    if len(ensemble) > 1:
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
        lines += [f"server.{n.myid}=127.0.0.1:{n.peer_port}:{n.election_port}" for n in ensemble]
        (node.data_dir / "myid").write_text(f"{node.myid}\n")
    lines += settings.extra
    node.cfg_path.write_text("\n".join(lines) + "\n")


def jvm_command(java: str, classpath: str, base_dir: Path, node: Node) -> list[str]:
    """The command line of ``node``'s JVM (log configs from ``write_log_configs``)."""
    return [
        java,
        *JVM_FLAGS,
        f"-Dlog4j2.configurationFile={base_dir / 'log4j2.properties'}",
        f"-Dlogback.configurationFile={base_dir / 'logback.xml'}",
        f"-Dzookeeper.log.dir={node.data_dir}",
        "-cp",
        classpath,
        MAIN_CLASS,
        str(node.cfg_path),
    ]


def spawn(node: Node, command: list[str], env: Mapping[str, str]) -> None:
    """Start ``node``'s JVM from the spawner thread; ``node.proc`` is the new process."""
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


def wait_serving(nodes: list[Node], deadline: float) -> None:
    """Return once every node answers ``srvr`` with a serving mode.

    Raises ``BindFailure`` when a node exited because a port was taken, and
    ``ZooKeeperStartError`` when one exited otherwise or ``deadline`` (monotonic) passed.
    """
    waiting = list(nodes)
    while waiting:
        for node in list(waiting):
            if not node.alive():
                code = node.proc.returncode if node.proc is not None else None
                if _bind_failed(node):
                    raise BindFailure(node)
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
                f"{[n.index for n in waiting]}\n{log_tails(waiting)}"
            )
        time.sleep(0.05)  # poll the condition; the JVM offers nothing to wait on


def log_tails(nodes: list[Node]) -> str:
    return "\n".join(f"--- node {n.index} log ({n.log_path}):\n{n.log_tail()}" for n in nodes)
