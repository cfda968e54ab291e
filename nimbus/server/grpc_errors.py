"""No call ends in ``UNKNOWN``: every exception a handler lets escape gets a status.

- A write whose outcome is unknown, or ZooKeeper lost mid-call: ``UNAVAILABLE``, saying
  so and that a retry with the same request id returns the first outcome. The client
  retries ``UNAVAILABLE`` with the same request id, which is exactly what makes that safe.
- Lost leadership (``NotLeaderError``): ``UNAVAILABLE`` too; the client rediscovers.
- Anything else is a bug: logged with its traceback, ``INTERNAL`` with one line.

An interceptor, innermost, so the metrics interceptor outside it sees the mapped status.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, NoReturn

import grpc
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from fencing import NotLeaderError, WriteOutcomeUnknown
from nimbus.server.grpc_wrap import Behavior, StreamBehavior, WrappingInterceptor, aborted

log = logging.getLogger(__name__)

_ZOOKEEPER_TROUBLE = (WriteOutcomeUnknown, KazooException, KazooTimeoutError)


def status_for(method: str, error: Exception) -> tuple[grpc.StatusCode, str]:
    """The status and message an escaped exception becomes (logs the unexpected)."""
    name = method.rsplit("/", 1)[-1]
    if isinstance(error, _ZOOKEEPER_TROUBLE):
        return (
            grpc.StatusCode.UNAVAILABLE,
            f"{name}: the replica lost ZooKeeper during the call ({type(error).__name__}); "
            "its outcome is unknown. Retry with the same request id: a call that did land "
            "returns its first outcome, one that did not is done once",
        )
    if isinstance(error, NotLeaderError):
        return grpc.StatusCode.UNAVAILABLE, f"{name}: leadership ended during the call: {error}"
    log.error("%s failed with an unexpected error", method, exc_info=error)
    first_line = (str(error).splitlines() or [""])[0][:200]
    return (
        grpc.StatusCode.INTERNAL,
        f"{name}: internal error in the replica ({type(error).__name__}: {first_line}); "
        "its log has the traceback",
    )


class ErrorInterceptor(WrappingInterceptor):
    def __init__(self) -> None:
        super().__init__(_unary, _streaming)


def _abort(method: str, error: Exception, context: grpc.ServicerContext) -> NoReturn:
    code, message = status_for(method, error)
    context.abort(code, message)
    raise AssertionError("unreachable: abort raises")


def _unary(method: str, behavior: Behavior) -> Behavior:
    def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return behavior(request, context)
        except Exception as e:
            if aborted(context):
                raise
            _abort(method, e, context)

    return wrapped


def _streaming(method: str, behavior: StreamBehavior) -> StreamBehavior:
    def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from behavior(request, context)
        except Exception as e:
            if aborted(context):
                raise
            _abort(method, e, context)

    return wrapped
