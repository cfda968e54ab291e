"""The one place that makes KazooClients, gRPC servers and gRPC channels.

ZooKeeper authentication and ACLs, and gRPC TLS and tokens, are applied here and nowhere
else, so every connection in the project gets them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent import futures
from typing import Any

import grpc
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from cluster.errors import ZooKeeperUnavailableError
from cluster.security import client as client_security
from cluster.security.client import ClientSecurity
from cluster.security.tls import ServerTls
from cluster.security.zkauth import ZkAuth
from cluster.zkloop import watch_connection_loop

# Bounds on gRPC messages: packages travel in ~1 MiB chunks, so 8 MiB is generous.
MAX_GRPC_MESSAGE_BYTES = 8 * 1024 * 1024


def make_kazoo_client(
    hosts: str,
    *,
    session_timeout: float,
    read_only: bool = False,
    auth: ZkAuth | None = None,
) -> KazooClient:
    """A KazooClient that reconnects forever, with backoffs of a second at most.

    ``connection_retry`` governs (re)connecting, which is safe to repeat. ``command_retry``
    (``client.retry``) is what kazoo's recipes (the lock queue, data and children watches)
    retry their own calls with; without one kazoo makes an unbounded retry whose backoff
    grows to an hour, so a watch that hit a disconnect could wait that long to look
    again. Here it retries as long, but never waits more than a second. No code of this
    project writes through ``client.retry``: a write's outcome after a connection loss is
    unknown, and a re-send after session expiry is what fencing forbids (the lock recipe's
    own create is safe to repeat: its node name carries a uuid it looks for first).
    """
    connection_retry = KazooRetry(
        max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, max_jitter=0.2
    )
    command_retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, max_jitter=0.2)
    return KazooClient(
        hosts=hosts,
        timeout=session_timeout,
        connection_retry=connection_retry,
        command_retry=command_retry,
        read_only=read_only,
        auth_data=auth.auth_data if auth else None,
        default_acl=auth.acl if auth else None,
    )


#: A peer that does not answer an HTTP/2 PING within this long (frozen, black-holed) has
#: its connection closed and its calls failed UNAVAILABLE: a client moves on in about
#: KEEPALIVE_TIME + KEEPALIVE_TIMEOUT instead of waiting for the call's deadline. grpcio
#: 1.85 times a ping out after ``grpc.http2.ping_timeout_ms`` (a minute by default), not
#: ``grpc.keepalive_timeout_ms``, so both are set (``tests/test_factory.py``).
KEEPALIVE_TIME_MS = 1000
KEEPALIVE_TIMEOUT_MS = 1000
#: A channel that downloads packages waits longer for a PING's ack: the peer's ack queues
#: behind the DATA already in its socket buffer (megabytes: seconds on a slow link).
BULK_PING_TIMEOUT_MS = 10_000
#: The server pings its clients to find dead ones, not to fail over: an upload's client
#: acks behind its own DATA, so the server waits as long as a bulk channel.
SERVER_PING_TIMEOUT_MS = BULK_PING_TIMEOUT_MS
#: A connection attempt that gets no answer (a SYN dropped) gives up after this long, so a
#: call without ``wait_for_ready`` fails UNAVAILABLE at once rather than at its deadline.
CONNECT_TIMEOUT_MS = 1000
#: Reconnect soon after a refusal: a leader restarted on the same address is reached within
#: a second, not after gRPC's default backoff of up to two minutes.
RECONNECT_BACKOFF_MS = (100, 1000)


def connect(client: KazooClient, hosts: str, timeout: float) -> None:
    """Start ``client``; on a timeout, close it and raise ``ZooKeeperUnavailableError``.

    A started client is watched (``cluster.zkloop``): should kazoo's connection loop die,
    the process exits non-zero instead of running on without ZooKeeper.
    """
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError as e:
        client.stop()
        client.close()
        raise ZooKeeperUnavailableError(
            f"could not reach ZooKeeper at {hosts} within {timeout:.0f}s"
        ) from e
    watch_connection_loop(client, f"zookeeper {hosts}")


def _message_options() -> list[tuple[str, Any]]:
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
    ]


def channel_options(*, bulk: bool = False) -> list[tuple[str, Any]]:
    """Options of every client channel: message bounds, keepalive, fast reconnects.
    ``bulk``: a channel that streams packages to us, whose pings may wait behind DATA."""
    low, high = RECONNECT_BACKOFF_MS
    ping_timeout = BULK_PING_TIMEOUT_MS if bulk else KEEPALIVE_TIMEOUT_MS
    return [
        *_message_options(),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", ping_timeout),
        ("grpc.http2.ping_timeout_ms", ping_timeout),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.min_reconnect_backoff_ms", low),
        ("grpc.initial_reconnect_backoff_ms", low),
        ("grpc.max_reconnect_backoff_ms", high),
        ("grpc.min_connect_timeout_ms", CONNECT_TIMEOUT_MS),
        ("grpc.enable_retries", 0),  # NimbusClient retries, with request ids
    ]


def server_options() -> list[tuple[str, Any]]:
    """Options of every server: accept the clients' keepalive pings (the default policy
    answers pings more often than every 5 minutes with GOAWAY ``too_many_pings``)."""
    return [
        *_message_options(),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.keepalive_time_ms", 10_000),  # the server's own pings: find dead clients
        ("grpc.keepalive_timeout_ms", SERVER_PING_TIMEOUT_MS),
        ("grpc.http2.ping_timeout_ms", SERVER_PING_TIMEOUT_MS),
    ]


def make_grpc_server(
    listen: str,
    *,
    max_workers: int = 16,
    interceptors: Sequence[grpc.ServerInterceptor[Any, Any]] = (),
    tls: ServerTls | None = None,
) -> tuple[grpc.Server, int]:
    """A gRPC server bound to ``listen`` (``host:port``, port 0 picks a free one).

    Returns the server (not yet started) and the port actually bound. ``interceptors``
    see every call (the daemon's metrics).
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        # gRPC sets SO_REUSEPORT by default: a second replica started on a port in use
        # would silently share it (clients reaching either at random). Refuse instead.
        options=[*server_options(), ("grpc.so_reuseport", 0)],
        interceptors=list(interceptors),
    )
    try:
        if tls is not None:
            port = server.add_secure_port(listen, tls.credentials())
        else:
            port = server.add_insecure_port(listen)
    except RuntimeError as e:  # newer grpcio raises where older ones returned 0
        raise OSError(f"could not bind the gRPC server to {listen} (in use?): {e}") from e
    if port == 0:
        raise OSError(f"could not bind the gRPC server to {listen} (in use?)")
    return server, port


def make_channel(
    target: str, security: ClientSecurity | None = None, *, bulk: bool = False
) -> grpc.Channel:
    """A gRPC channel to one replica (``host:port``).

    TLS and the bearer token come from ``security``, else from the process default the
    daemon, supervisor or CLI set from its flags (plaintext without a token if none did).
    """
    return (security or client_security.default()).channel(target, channel_options(bulk=bulk))
