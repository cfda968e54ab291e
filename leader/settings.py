"""The elector's settings and the names of its steps."""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.errors import ConfigError
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


#: Seconds between a queued replica's beats (H).
DEFAULT_BEAT_INTERVAL = 0.2
#: Seconds a beat must stay unchanged before the replica behind preempts it (P).
DEFAULT_SILENCE_WINDOW = 2.0
#: Seconds the leader claims leadership after *sending* its last acknowledged beat (L).
DEFAULT_LEADER_LEASE = 0.8
#: Bound on how much faster or slower two replicas' monotonic clocks may run (rho).
CLOCK_RATE_BOUND = 1e-3
#: Seconds the longest unfenced action may take after a claim check (T_op): a gRPC
#: answer, a pod label, a health reply. Not a client's deadline.
MAX_UNFENCED_ACTION = 1.0


def margin_holds(*, leader_lease: float, silence_window: float) -> bool:
    """``L*(1+rho) + T_op <= P*(1-rho)``: a silent leader's claims and unfenced actions
    are over before the replica behind it can act on its silence."""
    left = leader_lease * (1 + CLOCK_RATE_BOUND) + MAX_UNFENCED_ACTION
    return left <= silence_window * (1 - CLOCK_RATE_BOUND)


@dataclass(frozen=True)
class BeatSettings:
    """H, P and L of DESIGN item 8, checked once here. ``silence_window`` 0 turns silence
    preemption off (beats and the claim lease stay)."""

    interval: float = DEFAULT_BEAT_INTERVAL
    silence_window: float = DEFAULT_SILENCE_WINDOW
    leader_lease: float = DEFAULT_LEADER_LEASE

    def __post_init__(self) -> None:
        if not 0 < self.interval < self.leader_lease:
            raise ConfigError(
                f"--beat-interval ({self.interval}s) must be > 0 and below --leader-lease "
                f"({self.leader_lease}s), or the lease lapses between beats"
            )
        if self.silence_window < 0:
            raise ConfigError(f"--silence-window must be >= 0 (0: off), got {self.silence_window}")
        if self.silence_window and not margin_holds(
            leader_lease=self.leader_lease, silence_window=self.silence_window
        ):
            raise ConfigError(
                f"--leader-lease {self.leader_lease}s and --silence-window "
                f"{self.silence_window}s break the rule L*(1+rho) + T_op <= P*(1-rho) "
                f"(rho = {CLOCK_RATE_BOUND:g}, T_op = {MAX_UNFENCED_ACTION:g}s): a silent "
                "leader could still claim or act when the replica behind it takes over"
            )

    @property
    def closed_window(self) -> float:
        """The silence window for a replica whose process is heard dead (its kernel closed
        our connection to it: ``leader.peer_link``): its claim lease is over by then,
        ``L*(1+rho) + H <= W*(1-rho)``. Never longer than P."""
        window = (self.leader_lease * (1 + CLOCK_RATE_BOUND) + self.interval) / (
            1 - CLOCK_RATE_BOUND
        )
        return min(window, self.silence_window) if self.silence_window else 0.0


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
    beats: BeatSettings = field(default_factory=BeatSettings)


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
