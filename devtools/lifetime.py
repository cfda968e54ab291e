"""``with`` for what devtools starts: started on entry, stopped on exit however it ended.

Invariant: every subclass's ``stop`` is idempotent, so leaving the block after an explicit
``stop`` (or after a ``start`` that failed half-way and cleaned up) is harmless.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from typing import Protocol, Self


class Started:
    """A local service a test or a developer starts: ``with Service(...) as s:``."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()  # however the block ended: the exception, if any, goes on


class _Stoppable(Protocol):
    def stop(self) -> None: ...


class StopAtExit:
    """What was started and is not stopped yet; an ``atexit`` hook stops each one still
    here on a normal exit (also a ``SystemExit``, such as a test run's SIGTERM), going on
    past any that fails to stop."""

    def __init__(self) -> None:
        self._live: set[_Stoppable] = set()
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def add(self, started: _Stoppable) -> None:
        with self._lock:
            self._live.add(started)

    def discard(self, stopped: _Stoppable) -> None:
        with self._lock:
            self._live.discard(stopped)

    def stop_all(self) -> None:
        with self._lock:
            live = list(self._live)
        for started in live:
            with contextlib.suppress(Exception):
                started.stop()
