"""Polling with a deadline: how tests wait for a condition instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "",
) -> T:
    """Return the first truthy value of ``predicate()``; fail the test after ``timeout`` s.

    An exception from ``predicate`` counts as "not yet" and is shown if time runs out,
    so a predicate can simply try an operation that fails until the system is ready.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            what = message or getattr(predicate, "__name__", "condition")
            detail = f" (last error: {last_error!r})" if last_error is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}")
        time.sleep(interval)
