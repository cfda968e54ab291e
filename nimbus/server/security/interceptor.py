"""The server's check of every call: bearer token for mutating calls, optionally reads.

A refused call is answered ``UNAUTHENTICATED`` before its handler runs and before its
request is even parsed, so it changes nothing and hostile bytes from an unauthenticated
peer never reach the protobuf decoder. Methods not known to be read-only count as
mutating: a method added later is protected until someone says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from cluster.security.tokens import TokenSet, bearer

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # generic only in the type stubs
    _ServerInterceptor = grpc.ServerInterceptor[Any, Any]
else:
    _ServerInterceptor = grpc.ServerInterceptor

SERVICE = "/storm.nimbus.v1.Nimbus/"
#: Calls that change nothing; open unless reads require a token too.
READ_ONLY = frozenset(
    SERVICE + name
    for name in (
        "GetLeaderAddress",
        "GetAllNimbusAddresses",
        "ListTopologies",
        "GetTopology",
        "GetClusterSummary",
        "DownloadCode",
    )
)
#: Always open: load balancers and Kubernetes probe health without credentials.
HEALTH_PREFIX = "/grpc.health.v1.Health/"


def needs_token(method: str, *, auth_reads: bool) -> bool:
    if method.startswith(HEALTH_PREFIX):
        return False
    return auth_reads or method not in READ_ONLY


class AuthInterceptor(_ServerInterceptor):
    """Refuses calls without a valid token; a wrong token is refused on any method."""

    def __init__(self, tokens: TokenSet, *, auth_reads: bool = False) -> None:
        self._tokens = tokens
        self._auth_reads = auth_reads

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = details.method
        presented = bearer(details.invocation_metadata)
        if presented is not None and not method.startswith(HEALTH_PREFIX):
            if not self._tokens.accepts(presented):
                return _denied(continuation(details), f"{_short(method)}: invalid bearer token")
        elif presented is None and needs_token(method, auth_reads=self._auth_reads):
            return _denied(
                continuation(details),
                f"{_short(method)} needs a bearer token (authorization: Bearer <token>)",
            )
        return continuation(details)


def _short(method: str) -> str:
    return method.rsplit("/", 1)[-1] or method


def _denied(
    handler: grpc.RpcMethodHandler[Any, Any] | None, message: str
) -> grpc.RpcMethodHandler[Any, Any] | None:
    """A handler of the same shape that aborts at once; the request stays unparsed bytes."""
    if handler is None:
        return None  # unknown method: gRPC answers UNIMPLEMENTED, which reveals nothing

    def abort(request: Any, context: grpc.ServicerContext) -> Any:
        log.info("refused a call: %s (peer %s)", message, context.peer())
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)
