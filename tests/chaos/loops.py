"""Daemon threads that poll until told to stop: one per index, one stop event for all."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Self


class Loops:
    """Runs ``body(index)`` on a daemon thread per index; ``body`` ends once ``stopping``
    is set. ``stop`` sets it and joins each thread for at most ``join_s`` (long enough for
    a call in flight to end by its own deadline)."""

    def __init__(
        self, body: Callable[[int], None], indexes: Iterable[int], *, name: str, join_s: float
    ) -> None:
        self.stopping = threading.Event()
        self._join_s = join_s
        self._threads = [
            threading.Thread(target=body, args=(i,), name=f"{name}-{i}", daemon=True)
            for i in indexes
        ]

    def start(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(self._join_s)
