"""Where ZooKeeper comes from on this machine, and what a running server answers.

Java, ZooKeeper's jars and free loopback ports are found without internet access; jars
in this order: ``$ZOOKEEPER_HOME``, the jars the pyspark wheel ships (ZooKeeper 3.9 and
its dependencies), Debian's ``zookeeper`` package. Every lookup takes its environment as
an argument (default ``os.environ``), so "nothing installed" is testable on any host.

Invariant: readiness is what a server answers (``srvr``'s mode, a write through a real
client), never an open port: the JVM binds its client port well before it serves.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from cluster.errors import JavaNotFoundError, ZooKeeperNotFoundError, ZooKeeperStartError

EXTERNAL_ENV: Final = "NIMBUS_TEST_ZOOKEEPER"
JAVA_INSTALL_HINT: Final = (
    "install a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
)
SERVING_MODES: Final = frozenset({"standalone", "leader", "follower", "observer"})
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


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


#: Where this process hands out its next port: a random start, then one after another,
#: so no port is handed out twice until the range wraps (random picks collided: two
#: replicas of one test were given the same port).
_cursor: list[int] = []
_cursor_guard = threading.Lock()


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free a moment ago, below the kernel's ephemeral
    range: outgoing connections take their local port from that range, so none can take
    these between now and the server's bind (with many runs on one machine, they did).
    Another listener may still pick the same one; :meth:`ZooKeeperCluster.start` retries
    once with fresh ports on a bind failure."""
    top = _ephemeral_low()
    bottom = max(1024, top - 12_000)
    span = top - bottom
    socks: list[socket.socket] = []
    try:
        with _cursor_guard:
            if not _cursor:
                _cursor.append(random.randrange(span))
            for _ in range(span):
                if len(socks) == count:
                    break
                _cursor[0] = (_cursor[0] + 1) % span
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    s.bind(("127.0.0.1", bottom + _cursor[0]))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
        if len(socks) < count:
            raise OSError(f"no {count} free ports between {bottom} and {top}")
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def check_port_free(port: int) -> None:
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


def wait_writable(connect_string: str, deadline: float) -> str | None:
    """Retry a scratch create+delete through a real client: None once one succeeds, else
    the last error when ``deadline`` (monotonic) passes.

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
