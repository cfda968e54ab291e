"""Background loops that never die silently.

``guarded(name, body, stopping=...)`` is a thread target: it runs ``body`` and, when
``body`` raises anything, logs it with the traceback and runs it again after a backoff,
until ``stopping()`` says the loop should end. A surprise (a disk error, a damaged record)
costs one pass, never the thread, so a replica cannot keep answering while a loop it
depends on is dead. ``guarded_thread`` is the daemon thread of such a loop, ended by an
event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def guarded(
    name: str,
    body: Callable[[], None],
    *,
    stopping: Callable[[], bool],
    backoff: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Callable[[], None]:
    """A thread target running ``body`` until it returns normally or ``stopping()``."""

    def run() -> None:
        while True:
            try:
                body()
                return
            except Exception:
                if stopping():
                    return
                log.exception("%s loop failed; restarting it in %.1fs", name, backoff)
            sleep(backoff)
            if stopping():
                return

    return run


def guarded_thread(
    name: str, body: Callable[[], None], stop: threading.Event, *, backoff: float = 1.0
) -> threading.Thread:
    """A daemon thread named ``name`` running ``body`` guarded until ``stop`` is set."""
    return threading.Thread(
        target=guarded(name, body, stopping=stop.is_set, backoff=backoff), name=name, daemon=True
    )
