"""How a long-running command (``serve``, ``supervisor``) learns to stop.

SIGTERM and SIGINT only set an event; the main thread polls it and then runs the
command's own shutdown, outside the signal handler.
"""

from __future__ import annotations

import signal
import threading


def stop_on_signals() -> threading.Event:
    """An event set by the first SIGTERM or SIGINT (the handlers are installed now)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
