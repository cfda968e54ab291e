"""The gRPC server factory: a port in use is an error, never a silently shared port."""

from __future__ import annotations

import pytest

from cluster.factory import make_grpc_server, make_kazoo_client


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
