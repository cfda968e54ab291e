"""A gRPC server interceptor that reports every call's method, status code and duration.

An interceptor rather than code in the servicer: every service on the server (Nimbus,
health) is measured the same way, and the servicer stays about the API alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from nimbus.server.grpc_wrap import Behavior, StreamBehavior, WrappingInterceptor

#: (full method name, status code name, seconds) for each finished call.
Observe = Callable[[str, str, float], None]


def _code_name(context: grpc.ServicerContext, error: BaseException | None) -> str:
    """The status the call ended with: what the handler set, else OK or UNKNOWN."""
    code = context.code()  # type: ignore[attr-defined]
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(error, GeneratorExit):
        return "CANCELLED"  # the client went away during a stream
    return "UNKNOWN" if error is not None else "OK"


class MetricsInterceptor(WrappingInterceptor):
    """Wraps each method handler so that its outcome is observed exactly once."""

    def __init__(self, observe: Observe) -> None:
        self._observe = observe
        super().__init__(self._unary, self._streaming)

    @contextmanager
    def _observed(self, method: str, context: grpc.ServicerContext) -> Iterator[None]:
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            yield
        except BaseException as e:
            error = e
            raise
        finally:
            self._observe(method, _code_name(context, error), time.perf_counter() - started)

    def _unary(self, method: str, behavior: Behavior) -> Behavior:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            with self._observed(method, context):
                return behavior(request, context)

        return wrapped

    def _streaming(self, method: str, behavior: StreamBehavior) -> StreamBehavior:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            with self._observed(method, context):
                yield from behavior(request, context)

        return wrapped
