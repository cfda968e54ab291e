"""The embedded ZooKeeper, its fault helpers, the fault proxy and ``nimbus zookeeper``."""

from __future__ import annotations

import os
import queue
import signal
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError

from cluster.errors import JavaNotFoundError
from cluster.factory import make_kazoo_client
from devtools.faultproxy import FaultProxy
from devtools.zkserver import ZooKeeperCluster, find_java, free_ports, server_mode, srvr
from tests.processes import REPO, python_child
from tests.waiting import wait_until
from tests.zk_fixtures import kazoo_session


def unique_path() -> str:
    return f"/zk-test-{uuid.uuid4().hex[:12]}"


def create_landed(client: KazooClient, path: str, value: bytes) -> bool:
    """One create attempt; True once the node exists (a lost reply may hide a success)."""
    with suppress(NodeExistsError):
        client.create(path, value)
    return True


def lines_of(stream: Iterator[str]) -> queue.Queue[str]:
    """Read a child's output on a thread, so the test can wait on it with a deadline."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def next_line_with(lines: queue.Queue[str], prefix: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            break
        if line.startswith(prefix):
            return line
        seen.append(line)
    raise AssertionError(f"no line starting with {prefix!r} within {timeout} s; got {seen}")


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


# --------------------------------------------------------------------------- servers


def test_standalone_server_stores_and_returns_data(zk_client: KazooClient) -> None:
    zk_client.create("/greeting", b"hello")
    assert zk_client.get("/greeting")[0] == b"hello"
    assert zk_client.get_children("/") == ["greeting"], "the test's chroot starts empty"


def test_ensemble_replicates_a_write_to_every_member(healthy_ensemble: ZooKeeperCluster) -> None:
    ens = healthy_ensemble
    assert sorted(ens.node_mode(i) or "" for i in range(3)) == ["follower", "follower", "leader"]
    path = unique_path()
    with kazoo_session(ens.node_connect_string(0)) as writer:
        writer.create(path, b"replicated")
    try:
        for i in range(3):
            with kazoo_session(ens.node_connect_string(i)) as reader:
                reader.sync(path)
                assert reader.get(path)[0] == b"replicated"
    finally:
        with kazoo_session(ens.connect_string) as cleaner:
            cleaner.delete(path)


def test_ensemble_keeps_writing_after_its_leader_is_killed(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    ens = healthy_ensemble
    victim = ens.leader_index()
    assert victim is not None
    path = unique_path()
    with kazoo_session(ens.connect_string) as client:
        ens.kill(victim)
        assert not ens.is_alive(victim)
        wait_until(lambda: create_landed(client, path, b"while-down"), timeout=30)
        survivors = [i for i in range(3) if i != victim]
        assert sorted(ens.node_mode(i) or "" for i in survivors) == ["follower", "leader"]

        ens.restart(victim)
        assert ens.node_mode(victim) in ("follower", "leader")
        with kazoo_session(ens.node_connect_string(victim)) as reader:
            reader.sync(path)
            assert reader.get(path)[0] == b"while-down", "the restarted node caught up"
        client.delete(path)


def test_ensemble_keeps_writing_while_a_member_is_paused(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    ens = healthy_ensemble
    victim = next(i for i in range(3) if ens.node_mode(i) == "follower")
    path = unique_path()
    ens.pause(victim)
    try:
        assert server_mode(ens.client_ports[victim], timeout=0.5) is None, "paused: silent"
        with kazoo_session(ens.connect_string) as client:
            wait_until(lambda: create_landed(client, path, b"while-paused"), timeout=30)
    finally:
        ens.resume(victim)
    wait_until(lambda: ens.node_mode(victim) == "follower", timeout=30)
    with kazoo_session(ens.node_connect_string(victim)) as reader:
        reader.sync(path)
        assert reader.get(path)[0] == b"while-paused"
        reader.delete(path)


def test_no_zookeeper_survives_its_parent_being_killed(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from devtools.zkserver import ZooKeeperCluster
        cluster = ZooKeeperCluster(size=3, base_dir=Path(sys.argv[1]))
        cluster.start()
        print("PIDS", *cluster.pids(), flush=True)
        sys.stdin.read()
        """
    )
    # Killed at the block's end (SIGKILL: no atexit, no finally); only PDEATHSIG can clean up.
    with python_child("-c", script, str(tmp_path), stdin=True) as (_, out):
        line = next_line_with(lines_of(out), "PIDS", timeout=60)
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 3 and not any(process_gone(p) for p in pids)
    wait_until(lambda: all(process_gone(p) for p in pids), timeout=15, message="JVMs gone")


def test_missing_java_is_reported_with_what_to_install(tmp_path: Path) -> None:
    no_java = {"PATH": str(tmp_path)}
    with pytest.raises(JavaNotFoundError, match="openjdk"):
        find_java(no_java)
    with pytest.raises(JavaNotFoundError, match="Java 17"):
        ZooKeeperCluster(env=no_java).start()

    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | no_java
    result = subprocess.run(
        [sys.executable, "-m", "nimbus.cli", "zookeeper"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 1
    assert "install a Java 17+ runtime" in result.stderr


# --------------------------------------------------------------------------- the command


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_nimbus_zookeeper_serves_until_signalled(signum: signal.Signals) -> None:
    port = free_ports(1)[0]
    command = ("-m", "nimbus.cli", "zookeeper", "--port", str(port))
    with python_child(*command, stderr=subprocess.DEVNULL) as (proc, out):
        lines = lines_of(out)
        assert next_line_with(lines, "connect string:", 60).split()[-1] == f"127.0.0.1:{port}"
        connect = next_line_with(lines, "ZOOKEEPER=", 5).partition("=")[2]
        assert connect == f"127.0.0.1:{port}"
        with kazoo_session(connect) as client:
            path = client.create(unique_path(), b"via the command")
            assert client.get(path)[0] == b"via the command"
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 0
        assert server_mode(port) is None, "nothing serves on the port after exit"


# --------------------------------------------------------------------------- fault proxy


def test_blackholed_client_suspends_then_resumes_the_same_session(
    zk_server: ZooKeeperCluster, zk_hosts: str
) -> None:
    host, _, port = zk_server.connect_string.split(",")[0].rpartition(":")
    chroot = zk_hosts[zk_hosts.index("/") :]
    states: queue.Queue[str] = queue.Queue()

    def expect(state: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                seen = states.get(timeout=remaining)
            except queue.Empty:
                break
            assert seen != KazooState.LOST, "the session expired"
            if seen == state:
                return
        raise AssertionError(f"no {state} within {timeout} s")

    with FaultProxy(host, int(port)) as proxy:
        # 8 s: the reconnect must land before the server expires the session, and on a
        # loaded 2-core box the test thread may wake a second or more late.
        client = make_kazoo_client(f"{proxy.address}{chroot}", session_timeout=8.0)
        client.add_listener(states.put)
        client.start(timeout=20)
        try:
            expect(KazooState.CONNECTED, 5)
            session_id = client.client_id[0]
            proxy.blackhole()
            expect(KazooState.SUSPENDED, 12)
            proxy.pass_through()
            expect(KazooState.CONNECTED, 8)
            assert client.client_id[0] == session_id
            client.create("/after-the-cut", b"ok")
            assert client.get("/after-the-cut")[0] == b"ok"
        finally:
            client.stop()
            client.close()


class Echo(socketserver.ThreadingTCPServer):
    """Echoes every chunk back and records what it received."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.received = bytearray()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), EchoHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def got(self) -> bytes:
        with self.lock:
            return bytes(self.received)


class EchoHandler(socketserver.BaseRequestHandler):
    server: Echo

    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            while data := sock.recv(65536):
                with self.server.lock:
                    self.server.received += data
                sock.sendall(data)
        except OSError:
            pass


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def proxy(echo: Echo) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo.port) as p:
        yield p


def dial(proxy: FaultProxy, accepted: bool = True) -> socket.socket:
    """Connect through ``proxy``; with ``accepted``, also wait until the proxy took it.

    The kernel completes the handshake before the proxy accepts: a mode set in between
    would otherwise apply to a connection the proxy does not have yet.
    """
    before = proxy.accepted_count
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    if accepted:
        wait_until(lambda: proxy.accepted_count > before, timeout=5, message="accept")
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    return recv_exactly(sock, len(payload))


def test_proxy_passes_bytes_and_tracks_connections(proxy: FaultProxy) -> None:
    with dial(proxy) as a, dial(proxy) as b:
        assert round_trip(a, b"one") == b"one"
        assert round_trip(b, b"two" * 30000) == b"two" * 30000
        assert proxy.connection_count == 2
    wait_until(lambda: proxy.connection_count == 0, timeout=5)


def test_reset_closes_connections_with_rst_and_can_refuse_new_ones(proxy: FaultProxy) -> None:
    with dial(proxy) as sock:
        assert round_trip(sock, b"hi") == b"hi"
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            sock.recv(10)
    assert proxy.connection_count == 0

    proxy.reset(refuse_new=True)
    with (
        suppress(ConnectionResetError),
        dial(proxy, accepted=False) as refused,
    ):  # reset in connect or recv
        assert refused.recv(10) == b"", "refused: EOF or reset, never data"
    proxy.pass_through()
    with dial(proxy) as sock:
        assert round_trip(sock, b"back") == b"back"


def test_delay_holds_each_direction(proxy: FaultProxy) -> None:
    proxy.delay(0.15)  # both ways: the round trip takes two delays
    with dial(proxy) as sock:
        started = time.monotonic()
        assert round_trip(sock, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.3
        proxy.delay(0.15, "upstream")
        started = time.monotonic()
        assert round_trip(sock, b"half") == b"half"
        assert time.monotonic() - started >= 0.15


def test_upstream_blackhole_discards_requests_for_good(proxy: FaultProxy, echo: Echo) -> None:
    with dial(proxy) as sock:
        assert round_trip(sock, b"before|") == b"before|"
        proxy.blackhole("upstream")
        sock.sendall(b"lost|")
        wait_until(lambda: proxy.dropped_bytes("upstream") >= 5, timeout=5)
        proxy.pass_through()
        assert round_trip(sock, b"after|") == b"after|"
    assert echo.got() == b"before|after|", "dropped, not delivered late"


def test_downstream_blackhole_lets_requests_through_but_loses_replies(
    proxy: FaultProxy, echo: Echo
) -> None:
    with dial(proxy) as sock:
        proxy.blackhole("downstream")
        sock.sendall(b"ping1")
        wait_until(lambda: echo.got() == b"ping1", timeout=5)
        wait_until(lambda: proxy.dropped_bytes("downstream") >= 5, timeout=5)
        proxy.pass_through()
        assert round_trip(sock, b"ping2") == b"ping2", "the first reply is gone"


def test_blackhole_is_silence_not_a_reset(proxy: FaultProxy) -> None:
    with dial(proxy) as sock:
        proxy.blackhole()
        sock.sendall(b"anyone?")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(10)  # neither data, nor EOF, nor a reset
        assert proxy.connection_count == 1


def test_connections_made_during_a_blackhole_go_through_after_it(proxy: FaultProxy) -> None:
    proxy.blackhole()
    with dial(proxy, accepted=False) as sock:
        sock.sendall(b"early")
        assert proxy.connection_count == 0, "held in the backlog, like a retried SYN"
        proxy.pass_through()
        assert recv_exactly(sock, 5) == b"early"


def test_stopped_proxy_leaves_no_thread_and_refuses(echo: Echo) -> None:
    proxy = FaultProxy("127.0.0.1", echo.port).start()
    port = proxy.port
    with dial(proxy) as sock:
        assert round_trip(sock, b"x") == b"x"
        proxy.stop()
        assert sock.recv(1) == b""
    assert not [t for t in threading.enumerate() if t.name == f"faultproxy-{port}"]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_the_embedded_zookeeper_purges_old_snapshots_and_logs(zk_server: ZooKeeperCluster) -> None:
    """Beats write forever (five a second per queued replica): the server must purge."""
    lines = zk_server.config_path(0).read_text().splitlines()
    assert "autopurge.snapRetainCount=3" in lines and "autopurge.purgeInterval=1" in lines
    assert srvr(zk_server.client_ports[0]), "a server started with them serves"


def test_the_ensemble_is_configured_against_zookeepers_own_faults(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    """Settings that shorten ZooKeeper's own faults (issue 31), as the servers started."""
    lines = healthy_ensemble.config_path(0).read_text().splitlines()
    assert "learner.asyncSending=true" in lines and "digest.enabled=true" in lines
    (sync_limit,) = [int(line.split("=")[1]) for line in lines if line.startswith("syncLimit=")]
    (tick,) = [int(line.split("=")[1]) for line in lines if line.startswith("tickTime=")]
    assert sync_limit * tick <= 3_000 or sync_limit == 3
    assert all(srvr(port) for port in healthy_ensemble.client_ports), "every server serves"
