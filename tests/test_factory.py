"""The gRPC server factory: a port in use is an error, never a silently shared port."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.factory import make_channel, make_grpc_server, make_kazoo_client
from cluster.security.client import ClientSecurity
from tests.cluster import REPO


def test_a_second_server_on_a_port_in_use_is_refused_with_the_address_named() -> None:
    first, port = make_grpc_server("127.0.0.1:0")
    first.start()
    try:
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            make_grpc_server(f"127.0.0.1:{port}")
    finally:
        first.stop(None)


def test_kazoo_retries_back_off_a_second_at_most() -> None:
    """kazoo's own default command retry, which its lock and watch recipes use, backs off
    up to an hour; every client made here waits a second at most between tries."""
    client = make_kazoo_client("127.0.0.1:1", session_timeout=2.0)
    assert client._retry is not None and client._retry.max_delay <= 1.0
    assert client._conn_retry is not None and client._conn_retry.max_delay <= 1.0


_FROZEN_SERVER = """
import sys, time
from grpc_health.v1 import health, health_pb2_grpc
from cluster.factory import make_grpc_server
server, port = make_grpc_server("127.0.0.1:0")
health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
server.start()
print(port, flush=True)
time.sleep(600)
"""


def test_a_call_to_a_frozen_peer_fails_unavailable_by_keepalive_not_at_its_deadline() -> None:
    """A frozen peer (SIGSTOP, a paused VM) keeps its TCP connections: only an unanswered
    HTTP/2 PING shows it. grpcio 1.85 times a ping out after ``grpc.http2.ping_timeout_ms``
    (a minute by default), not ``grpc.keepalive_timeout_ms``: without it every relay and
    client call to a frozen leader waited out its whole deadline."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _FROZEN_SERVER], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    channel = None
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the server process printed no port within 60 s"
        port = int(proc.stdout.readline())
        channel = make_channel(f"127.0.0.1:{port}", ClientSecurity())
        stub = health_pb2_grpc.HealthStub(channel)
        stub.Check(health_pb2.HealthCheckRequest(), timeout=10)  # connected first
        os.kill(proc.pid, signal.SIGSTOP)
        with pytest.raises(grpc.RpcError) as failed:
            stub.Check(health_pb2.HealthCheckRequest(), timeout=20)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value.details()
    finally:
        if channel is not None:
            channel.close()
        proc.kill()
        proc.wait(timeout=30)
