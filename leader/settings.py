"""The elector's settings and the names of its steps."""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.interfaces import IAsyncResult

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
#: Pause after losing our lock node before queueing again, and between queue attempts
#: (``leader.cycle``).
REQUEUE_BACKOFF = 1.0


#: Seconds between a queued replica's beats (H).
DEFAULT_BEAT_INTERVAL = 0.2
#: Seconds a beat must stay unchanged before the replica behind preempts it (P), at least.
DEFAULT_SILENCE_WINDOW = 2.0
#: The shortest claim a beat announces (L_base): seconds the leader claims leadership after
#: *sending* an acknowledged beat while ZooKeeper answers fast. A beat announces more when
#: the latency its beats observe grows (``leader.beat_lease``).
DEFAULT_LEADER_LEASE = 0.6
#: Bound on how much faster or slower two replicas' monotonic clocks may run (rho).
CLOCK_RATE_BOUND = 1e-3
#: Seconds the longest unfenced action may take after a claim check (T_op): a gRPC
#: answer, a pod label PATCH (its timeout), a health reply. Not a client's deadline.
MAX_UNFENCED_ACTION = 0.2
#: A beat announces this many times the longest round trip its sender's beats had lately
#: (k): under a uniformly slow ZooKeeper a beat is answered up to 2 fsyncs after its send
#: and the next answer comes an fsync later, so a claim must outlast 1.5 round trips.
LEASE_PER_LATENCY = 2.5
#: ... and this many times the wait of its oldest beat in flight, while that wait is
#: ``ONSET_WAIT`` times longer than any round trip remembered: a slow spell's onset, when
#: the wait is all that is known and the first slow replies come two fsyncs after their
#: send (measured: 3 times left 0.15-0.35 s gaps at the onset, irregular fsync batches).
#: Not in a steady slow spell, where the oldest beat's wait is about the round trip: a
#: claim of 4 round trips there made a stopped leader wait 10 s to be replaced.
LEASE_PER_WAIT = 4.0
ONSET_WAIT = 1.5
#: Seconds an observed latency is remembered: the lease shrinks back this long after a
#: slow spell, not at the first fast reply (a disk that stalls once often stalls again).
LATENCY_MEMORY = 10.0
#: Beats stay in flight at most this long (or the announced lease, when longer) before the
#: beater stops sending more: a replica whose replies are lost soon stops beating at
#: ZooKeeper too, so its silence is seen, while a slow but answering ZooKeeper keeps
#: receiving beats while the first slow replies are still on their way.
PIPELINE_FLOOR = 1.0
#: ... or this long while ZooKeeper answered a read of our other session (``bulk``, on the
#: same server) sent after the oldest beat in flight: our requests are slow, not lost. At
#: the onset of 2 s fsyncs on an ensemble the leader otherwise stopped beating after 1 s,
#: and its claim lapsed for 7.7 s; a leader whose replies are lost gets no such answer,
#: so it still stops after ``PIPELINE_FLOOR`` (a 2 s floor for both made that 9.2 s).
PIPELINE_ANSWERED = 2.0
#: The probe goes out once the oldest beat in flight has waited this long.
PROBE_AFTER = 0.25


def margin_holds(*, leader_lease: float, silence_window: float) -> bool:
    """``L*(1+rho) + T_op <= P*(1-rho)``: a silent leader's claims and unfenced actions
    are over before the replica behind it can act on its silence."""
    return short_window(leader_lease) <= silence_window


def short_window(lease: float) -> float:
    """``(L_v + T_op)*(1+rho) / (1-rho)``: once a beat that announced ``lease`` stays the
    last one seen for this long (on our clock), its sender's claim, and any unfenced action
    begun under it, is over on every clock within the rate bound (T_op too is timed on the
    sender's clock, as the SPIN model pointed out: 0.2 ms at the defaults)."""
    return (lease + MAX_UNFENCED_ACTION) * (1 + CLOCK_RATE_BOUND) / (1 - CLOCK_RATE_BOUND)


@dataclass(frozen=True)
class BeatSettings:
    """H, P and L_base of DESIGN items 8-9, checked once here. ``silence_window`` 0 turns
    silence preemption off (beats and the claim lease stay)."""

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

    def window(self, announced: float | None) -> float:
        """How long a beat that announced ``announced`` must stay unchanged: at least P,
        longer when its sender announced a longer claim (a slow ZooKeeper). A beat that
        announced nothing (a replica of an older release) gets P, which its fixed lease
        was checked against."""
        if announced is None:
            return self.silence_window
        return max(self.silence_window, short_window(announced))

    def dead_window(self, announced: float | None) -> float | None:
        """The window for a replica heard dead (a closed link and reconnects failing
        since: ``leader.peer_link``), None when none applies. Still the whole claim and
        T_op: a closed link is no proof of death (a REJECT rule gives one to a live
        leader), only a reason not to wait the extra margin of P against hiccups."""
        if announced is None or not self.silence_window:
            return None
        return min(self.window(announced), short_window(announced))


class GateStage(enum.Enum):
    """When the code gate runs: before queueing it is waited on; after winning, a miss
    means leaving the queue (never hold the lock while waiting for code)."""

    BEFORE_QUEUEING = "before queueing"
    AFTER_WINNING = "after winning"


@dataclass(frozen=True)
class ElectorSettings:
    """Checked once, here: a bad value is refused naming its field."""

    paths: Paths
    replica_id: str
    session_timeout: float
    gate_poll_interval: float = 0.5
    epochs_kept: int = 50
    beats: BeatSettings = field(default_factory=BeatSettings)

    def __post_init__(self) -> None:
        if not self.replica_id:
            raise ConfigError("ElectorSettings.replica_id must name the replica (host:port)")
        for name in ("session_timeout", "gate_poll_interval"):
            value = getattr(self, name)
            if not value > 0:  # also refuses NaN
                raise ConfigError(f"ElectorSettings.{name} must be > 0 seconds, got {value}")
        if self.epochs_kept < 1:
            raise ConfigError(
                f"ElectorSettings.epochs_kept must be >= 1 (the current term's), "
                f"got {self.epochs_kept}"
            )


def _no_word(_: object) -> None:
    """The default of a callback nobody listens to."""


@dataclass(frozen=True)
class ElectorCallbacks:
    """What the elector asks and tells its owner, in one value.

    ``has_all_code``: the code gate. ``on_elected(epoch, token, writer)`` when a term
    starts; ``on_deposed(why)`` whenever it ends, even after a failing ``on_elected``.
    ``leader_hint``: the leader's address for a refused write's error. ``taking_office``:
    told True on winning the lock and False once in office (or not), so background work
    can step aside for the round trips that decide how long there is no leader.
    ``on_stale_server(why)``: we won the lock on our server's view but the quorum refused
    the office; our server is behind or diverged, and queueing on it again would loop.
    ``step_aside()``: asked after winning, before taking office: a reason to leave the lock
    and queue again (the term that just ended was handed to another replica), or None.
    ``gate_given(stat of /storms)`` and ``step_aside_given(/handover, /leader-epoch)``: the
    same two after winning, answered from reads sent behind the winning listing
    (``leader.read_ahead``), not from a round trip each; None: the two above are asked.
    """

    has_all_code: CodeGate
    on_elected: Elected | None = None
    on_deposed: Deposed = _no_word
    leader_hint: Callable[[], str | None] | None = None
    taking_office: Callable[[bool], object] = _no_word
    on_stale_server: Callable[[str], object] = _no_word
    step_aside: Callable[[], str | None] = lambda: None
    gate_given: Callable[[IAsyncResult], bool] | None = None
    # a cheap read on another session to the same server (``leader.heartbeat``)
    probe: Callable[[], IAsyncResult] | None = None
    step_aside_given: Callable[[IAsyncResult, IAsyncResult], str | None] | None = None


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
