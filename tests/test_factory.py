"""The gRPC server factory: a port in use is an error, never a silently shared port."""

from __future__ import annotations

import pytest

from cluster.factory import make_grpc_server


def test_a_second_server_on_a_port_in_use_is_refused_with_the_address_named() -> None:
    first, port = make_grpc_server("127.0.0.1:0")
    first.start()
    try:
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            make_grpc_server(f"127.0.0.1:{port}")
    finally:
        first.stop(None)
