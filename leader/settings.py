"""The elector's settings and the names of its steps."""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster.paths import Paths
from fencing import FencedWriter, LeadershipToken

CodeGate = Callable[[], bool]
Elected = Callable[[int, LeadershipToken, FencedWriter], None]
Deposed = Callable[[str], None]

#: Entries of ``Elector.history`` kept: enough for any test or log reader, never unbounded.
HISTORY_KEPT = 1000
#: Pause after an unexpected error before queueing again, so a persistent fault does not spin.
ERROR_BACKOFF = 1.0
#: Pause after losing our lock node before queueing again (see ``leader.preemption``).
REQUEUE_BACKOFF = 1.0


class GateStage(enum.Enum):
    """When the code gate runs: before queueing it is waited on; after winning, a miss
    means leaving the queue (never hold the lock while waiting for code)."""

    BEFORE_QUEUEING = "before queueing"
    AFTER_WINNING = "after winning"


@dataclass(frozen=True)
class ElectorSettings:
    paths: Paths
    replica_id: str
    session_timeout: float
    gate_poll_interval: float = 0.5
    epochs_kept: int = 50


class History:
    """What the elector did, in words, for logs and for tests that wait on a step."""

    def __init__(self) -> None:
        self._entries: list[str] = []
        self._changed = threading.Condition()

    def add(self, entry: str) -> None:
        with self._changed:
            self._entries.append(entry)
            del self._entries[:-HISTORY_KEPT]
            self._changed.notify_all()

    def entries(self) -> list[str]:
        with self._changed:
            return list(self._entries)

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self._entries):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True
