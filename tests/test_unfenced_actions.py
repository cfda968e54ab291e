"""Unfenced actions taken on a claim end within T_op of the claim check (issue 41, point 5):
the pod label PATCH (against a local HTTPS server standing in for the Kubernetes API), the
leader label asked for without a claim, and the health service's Watch streams, which must
follow a claim that lapses without any event."""

from __future__ import annotations

import queue
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from leader.health import LEADER_SERVICE, NimbusHealth
from leader.settings import DEFAULT_BEAT_INTERVAL, MAX_UNFENCED_ACTION
from nimbus.server.podlabel import PodApi, PodLabeler
from tests.security_helpers import make_pki, write_secret
from tests.waiting import wait_until

SLACK = 0.3  # a loaded 2-core machine: thread wake-ups, the FIN reaching the server

# -- a Kubernetes API server stand-in ------------------------------------------------------


@dataclass
class Patch:
    role: str
    received: float  # monotonic, once the whole request was read
    ended: float | None = None  # when the client closed the connection (or we answered)
    answered: bool = False


@dataclass
class FakeApi:
    """An HTTPS server: each PATCH gets the next of ``behaviours`` ("hang": never answer;
    "dribble": a status line one byte at a time; "ok"), then "ok" for ever."""

    context: ssl.SSLContext
    behaviours: list[str]
    patches: list[Patch] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def roles(self) -> list[str]:
        return [p.role for p in list(self.patches)]

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                raw, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()
        self.listener.close()

    def _serve(self, raw: socket.socket) -> None:
        try:
            conn = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        with conn:
            conn.settimeout(10)
            try:
                patch = self._read(conn)
            except (OSError, ValueError):
                return
            self.patches.append(patch)
            behaviour = self.behaviours.pop(0) if self.behaviours else "ok"
            try:
                if behaviour == "ok":
                    body = b"{}"
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 2\r\nConnection: close\r\n\r\n" + body
                    )
                    patch.answered = True
                elif behaviour == "dribble":
                    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 200:
                        conn.sendall(bytes([byte]))
                        time.sleep(0.05)  # 10 s in all: no read ever waits 5 s
                else:  # hang: until the client goes
                    conn.settimeout(15)
                    conn.recv(1)
            except (OSError, ssl.SSLError):
                pass  # the client cut it
            patch.ended = time.monotonic()

    @staticmethod
    def _read(conn: ssl.SSLSocket) -> Patch:
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(4096)
            if not part:
                raise ValueError("closed before a request")
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += conn.recv(4096)
        role = "leader" if b'"leader"' in body else "follower"
        return Patch(role, time.monotonic())


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApi, PodApi]]:
    pki = make_pki(tmp_path / "pki")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    fake = FakeApi(context, [])
    token = write_secret(tmp_path / "token", "t0ken")
    pod = PodApi(f"https://127.0.0.1:{fake.port}", "prod", "nimbus-0", token, pki.ca)
    yield fake, pod
    fake.stop.set()


def test_a_leader_label_patch_is_cut_at_t_op_from_its_claim_check_and_retried(
    api: tuple[FakeApi, PodApi],
) -> None:
    """An API server that never answers, then one whose reply dribbles in (no single read
    waits long): each leader PATCH ends within T_op of the last claim check before it was
    sent; the third is answered, so the loop retried the cut ones."""
    fake, pod = api
    fake.behaviours[:] = ["hang", "dribble"]
    checks: list[float] = []

    def claims() -> bool:
        checks.append(time.monotonic())
        return True

    labeler, stop = PodLabeler(pod), threading.Event()
    labeler.start()
    labeler.follow_claim(claims, stop, 0.05)
    try:
        wait_until(
            lambda: any(p.answered for p in list(fake.patches)),
            timeout=30,
            message="a leader PATCH answered",
        )
    finally:
        stop.set()
        labeler.stop(flush=1.0)
    cut, answered = fake.patches[:2], fake.patches[2]
    assert fake.roles()[:3] == ["leader"] * 3 and answered.answered
    for patch in cut:
        assert patch.ended is not None
        checked = max(t for t in checks if t <= patch.received)
        took = patch.ended - checked
        assert took <= MAX_UNFENCED_ACTION + SLACK, f"a leader PATCH lasted {took:.2f}s"


def test_a_leader_label_asked_for_without_a_claim_is_not_patched(
    api: tuple[FakeApi, PodApi],
) -> None:
    """What ``_elected`` asked for on a resumed term whose claim was not yet valid: the
    label waits for the claim, then follows it."""
    fake, pod = api
    claims, stop = threading.Event(), threading.Event()
    labeler = PodLabeler(pod)
    labeler.start()
    labeler.follow_claim(claims.is_set, stop, 0.3)
    try:
        labeler.set_role("leader")
        time.sleep(1.0)
        assert "leader" not in fake.roles()
        claims.set()
        wait_until(lambda: fake.roles()[-1:] == ["leader"], timeout=10, message="labelled")
    finally:
        stop.set()
        labeler.stop(flush=1.0)


# -- the health service's Watch --------------------------------------------------------------


def test_a_watch_sees_a_lapsed_claim_within_a_beat_and_sees_it_back() -> None:
    claims = threading.Event()
    claims.set()
    health = NimbusHealth(connected=lambda: True, is_leader=claims.is_set)  # recheck: H
    server = grpc.server(futures.ThreadPoolExecutor(4))
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stream = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=LEADER_SERVICE)
    )
    seen: queue.Queue[tuple[float, int]] = queue.Queue()

    def read() -> None:
        try:
            for reply in stream:
                seen.put((time.monotonic(), reply.status))
        except grpc.RpcError:
            pass  # cancelled below

    threading.Thread(target=read, daemon=True).start()
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    try:
        assert seen.get(timeout=10)[1] == serving
        claims.clear()  # the claim lapses: no event, nobody calls refresh()
        lapsed = time.monotonic()
        at, status = seen.get(timeout=5)
        assert status == not_serving and at - lapsed <= DEFAULT_BEAT_INTERVAL + SLACK
        claims.set()
        back = time.monotonic()
        at, status = seen.get(timeout=5)
        assert status == serving and at - back <= DEFAULT_BEAT_INTERVAL + SLACK
        for _ in range(3):
            health.refresh()  # events that change nothing
        time.sleep(1.0)
        assert seen.empty(), "a stream hears changes only"
    finally:
        stream.cancel()
        channel.close()
        server.stop(0).wait(5)
    wait_until(
        lambda: not any(t.name == "health-watch" for t in threading.enumerate()),
        timeout=5,
        message="no look without a Watch",
    )
