"""What a client (CLI, ``NimbusClient``, a replica or supervisor fetching code) presents.

A process sets its default once (``set_default``) from its flags, so every channel it
opens (peer downloads included) speaks TLS and carries the token without each call site
having to know.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from cluster.envargs import add_env_flag
from cluster.errors import ConfigError
from cluster.security.tls import ClientTls, load_client_tls
from cluster.security.tokens import METADATA_KEY, SCHEME, load_client_token
from cluster.security.zkauth import parse_flag_bool

if TYPE_CHECKING:  # generic only in the type stubs
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.UnaryStreamClientInterceptor[Any, Any]
    _StreamUnary = grpc.StreamUnaryClientInterceptor[Any, Any]
    _StreamStream = grpc.StreamStreamClientInterceptor[Any, Any]
else:
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.UnaryStreamClientInterceptor
    _StreamUnary = grpc.StreamUnaryClientInterceptor
    _StreamStream = grpc.StreamStreamClientInterceptor


@dataclass(frozen=True)
class ClientSecurity:
    tls: ClientTls | None = None
    token: str | None = field(default=None, repr=False)

    def channel(self, target: str, options: Sequence[tuple[str, Any]]) -> grpc.Channel:
        opts = list(options)
        if self.tls is not None:
            if self.tls.server_name:
                opts.append(("grpc.ssl_target_name_override", self.tls.server_name))
            channel = grpc.secure_channel(target, self.tls.credentials(), options=opts)
        else:
            channel = grpc.insecure_channel(target, options=opts)
        if self.token:
            channel = grpc.intercept_channel(channel, _TokenInterceptor(self.token))
        return channel


_default = ClientSecurity()


def set_default(security: ClientSecurity) -> None:
    """What channels opened without explicit security use in this process."""
    global _default
    _default = security


def default() -> ClientSecurity:
    return _default


class _Details(
    collections.namedtuple(
        "_Details",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class _TokenInterceptor(
    _UnaryUnary,
    _UnaryStream,
    _StreamUnary,
    _StreamStream,
):
    """Adds ``authorization: Bearer <token>`` to every call (works with or without TLS)."""

    def __init__(self, token: str) -> None:
        self._entry = (METADATA_KEY, SCHEME + token)

    def _details(self, details: Any) -> _Details:
        metadata = [m for m in (details.metadata or ()) if m[0] != METADATA_KEY]
        metadata.append(self._entry)
        return _Details(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: Any, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: Any, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)


def add_client_flags(p: argparse.ArgumentParser) -> None:
    """The client flags: ``--tls``, ``--tls-ca/-cert/-key/-server-name``, ``--token-file``.

    The token itself only from a file or ``$NIMBUS_TOKEN``: never on the command line.
    """
    add_env_flag(p, "--tls", default="false", help="speak TLS to the replicas (true/false)")
    add_env_flag(p, "--tls-ca", default="", help="CA certificate(s) to trust (PEM)")
    add_env_flag(p, "--tls-cert", default="", help="client certificate (PEM), for mTLS")
    add_env_flag(p, "--tls-key", default="", help="client key (PEM), for mTLS")
    add_env_flag(p, "--tls-server-name", default="", help="name expected in the certificate")
    add_env_flag(p, "--token-file", default="", help="bearer token file ($NIMBUS_TOKEN)")


def from_args(args: argparse.Namespace) -> ClientSecurity:
    """Raises ``ConfigError`` naming the flag or file at fault."""
    try:
        tls_on = parse_flag_bool(args.tls)
    except ValueError as e:
        raise ConfigError(f"--tls: {e}") from e
    return ClientSecurity(
        tls=load_client_tls(
            enabled=tls_on,
            ca=args.tls_ca,
            cert=args.tls_cert,
            key=args.tls_key,
            server_name=args.tls_server_name,
        ),
        token=load_client_token(args.token_file),
    )
