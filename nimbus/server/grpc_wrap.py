"""Wrapping a gRPC method handler's behaviour, whatever its kind: one place for both
server interceptors (metrics, errors), so each says only what it adds to a call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

Behavior = Callable[[Any, grpc.ServicerContext], Any]
StreamBehavior = Callable[[Any, grpc.ServicerContext], Iterator[Any]]
#: (method, behaviour) -> the wrapped behaviour; one for unary replies, one for streams.
WrapUnary = Callable[[str, Behavior], Behavior]
WrapStream = Callable[[str, StreamBehavior], StreamBehavior]

if TYPE_CHECKING:  # generic in the stubs only
    Interceptor = grpc.ServerInterceptor[Any, Any]
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Interceptor = grpc.ServerInterceptor
    Handler = grpc.RpcMethodHandler


def wrap_handler(handler: Handler, method: str, unary: WrapUnary, streaming: WrapStream) -> Handler:
    """``handler`` with its behaviour wrapped: ``unary`` for calls that reply once,
    ``streaming`` for calls whose reply is a stream (the wrapper must be a generator)."""
    kinds: tuple[tuple[Any, Callable[..., Handler], Callable[[str, Any], Any]], ...] = (
        (handler.unary_unary, grpc.unary_unary_rpc_method_handler, unary),
        (handler.stream_unary, grpc.stream_unary_rpc_method_handler, unary),
        (handler.unary_stream, grpc.unary_stream_rpc_method_handler, streaming),
        (handler.stream_stream, grpc.stream_stream_rpc_method_handler, streaming),
    )
    for behavior, make, wrap in kinds:
        if behavior is not None:
            return make(
                wrap(method, behavior),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return handler


class WrappingInterceptor(Interceptor):
    """A server interceptor that wraps every method's behaviour: ``unary`` for calls that
    reply once, ``streaming`` for calls whose reply is a stream."""

    def __init__(self, unary: WrapUnary, streaming: WrapStream) -> None:
        self._wrap_unary = unary
        self._wrap_streaming = streaming

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        return wrap_handler(handler, method, self._wrap_unary, self._wrap_streaming)


def aborted(context: grpc.ServicerContext) -> bool:
    """True once the handler set a status (``context.abort`` raises after setting it)."""
    return isinstance(context.code(), grpc.StatusCode)  # type: ignore[attr-defined]
