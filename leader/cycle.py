"""The elector's cycle, decided: a pure machine, as ``leader.silence`` is for silence.

etcd's raft shape: the inputs are what the cycle just saw (the code gate's answer at a
stage, a queue attempt, how take-office went, why the term's token was cancelled, how the
check after a reconnect went, an error), and ``decide(now)`` returns one action with the
time to act. No I/O, no clock of its own: ``leader.elector`` feeds it from kazoo and acts;
tests feed it a fake clock.

The rules it keeps (docs/design.md, "Leadership"):

- Never hold the lock while waiting for code: a gate miss after winning leaves the queue
  (before queueing, the gate is polled instead).
- Never keep the lock without the office: every failed take-office leaves the queue, and
  a refusal by the quorum (our server granted the lock, the quorum says no) also says our
  server is behind, since queueing on it again would only loop.
- At most one queue attempt per ``REQUEUE_BACKOFF``: every attempt fires the watch of
  every replica behind us, and one that keeps failing must not spin.
- After our lock node was deleted (expired, or preempted by a successor that judged us
  gone), let the new leader settle for ``REQUEUE_BACKOFF`` before queueing again.
- A term whose token was cancelled by connection trouble is checked after reconnecting;
  any other reason ends it and leaves the queue.
- A ZooKeeper hiccup between steps starts the cycle again soon; any other error ends the
  term, leaves the queue (our node would keep every other replica waiting) and backs off
  ``ERROR_BACKOFF``, so a persistent fault does not spin.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from fencing.token import CancelReason
from leader.settings import ERROR_BACKOFF, REQUEUE_BACKOFF, GateStage

#: Pause before trying again after ZooKeeper failed a step (a hiccup, not a fault).
RETRY_PAUSE = 0.1


class TermVerdict(enum.Enum):
    """Why a term goes on or ends after a reconnect; the words are for the history."""

    RESUME = "resumed"
    LOST = "session or lock node lost while disconnected; queueing again"
    NOT_NAMED = "leader-epoch no longer names us; queueing again"
    NO_CODE = "waiting for code (after reconnecting)"


class OfficeOutcome(enum.Enum):
    """How the take-office multi-op went."""

    TOOK = "took office"
    REFUSED = "the quorum refused the office"  # NotLeaderError, WriteConflictError
    UNKNOWN = "the outcome is unknown"  # WriteOutcomeUnknown: the link dropped
    READ_FAILED = "a read failed"  # a KazooException before the write


class Verdict(enum.Enum):
    """What ``decide`` found; the words are for people."""

    WAIT_FOR_CODE = "the code gate failed before queueing: ask it again at wake_at"
    QUEUE = "queue on the lock at wake_at"
    TAKE_OFFICE = "the code gate passed after winning: take office"
    SERVE = "serve the term"
    CHECK_TERM = "check whether the term survived the dropped connection"
    RESUME = "resume the term, same epoch"
    LEAVE = "leave the queue, then queue again"
    FORGET = "forget the lock without releasing it (its link is down), then raise"
    RETRY = "start the cycle again"
    ABANDON = "cancel the token, leave the queue, then start again"
    STOP = "stopping"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    wake_at: float | None = None  # act at this moment, not before (None: at once)
    backoff: float = 0.0  # seconds to pause once the verdict's action is done
    stale_server: bool = False  # tell ``on_stale_server``: the quorum refused our server's lock


class _Input(enum.Enum):
    NONE = enum.auto()
    GATE = enum.auto()
    OFFICE = enum.auto()
    TERM_ENDED = enum.auto()
    TERM_CHECKED = enum.auto()
    FAILED = enum.auto()


class CycleMachine:
    """Not thread-safe: the elector's thread alone feeds it. Each input replaces the last;
    ``decide(now)`` answers the last one."""

    def __init__(self, *, gate_poll_interval: float) -> None:
        if gate_poll_interval <= 0:
            raise ValueError(f"the gate poll interval must be > 0, got {gate_poll_interval}")
        self._poll = gate_poll_interval
        self._queued_at = float("-inf")
        self._input = _Input.NONE
        self._stage = GateStage.BEFORE_QUEUEING
        self._passed = False
        self._office = OfficeOutcome.TOOK
        self._reason: CancelReason | None = None
        self._stopping = False
        self._term: TermVerdict | None = None
        self._zookeeper = False

    # -- inputs -------------------------------------------------------------------------

    def gate(self, stage: GateStage, passed: bool) -> None:
        """The code gate answered ``passed`` at ``stage``."""
        self._input, self._stage, self._passed = _Input.GATE, stage, passed

    def queued(self, now: float) -> None:
        """We entered the lock queue at ``now``."""
        self._queued_at = now

    def office(self, outcome: OfficeOutcome) -> None:
        self._input, self._office = _Input.OFFICE, outcome

    def term_ended(self, reason: CancelReason | None, *, stopping: bool) -> None:
        """The term's token was cancelled for ``reason`` (None: no reason recorded)."""
        self._input, self._reason, self._stopping = _Input.TERM_ENDED, reason, stopping

    def term_checked(self, verdict: TermVerdict | None) -> None:
        """The check after a reconnect gave ``verdict``; None: ZooKeeper failed it."""
        self._input, self._term = _Input.TERM_CHECKED, verdict

    def failed(self, *, zookeeper: bool) -> None:
        """A step raised: a ZooKeeper hiccup (or a write left unknown), or anything else."""
        self._input, self._zookeeper = _Input.FAILED, zookeeper

    # -- the decision -------------------------------------------------------------------

    def decide(self, now: float) -> Decision:
        if self._input is _Input.GATE:
            return self._after_gate(now)
        if self._input is _Input.OFFICE:
            return self._after_office()
        if self._input is _Input.TERM_ENDED:
            return self._after_term()
        if self._input is _Input.TERM_CHECKED:
            if self._term is None:
                return Decision(Verdict.CHECK_TERM, backoff=RETRY_PAUSE)
            if self._term is TermVerdict.RESUME:
                return Decision(Verdict.RESUME)
            return Decision(Verdict.LEAVE)
        if self._input is _Input.FAILED:
            if self._zookeeper:
                return Decision(Verdict.RETRY, backoff=RETRY_PAUSE)
            return Decision(Verdict.ABANDON, backoff=ERROR_BACKOFF)
        return Decision(Verdict.WAIT_FOR_CODE, now)  # nothing seen yet: ask the gate

    def _after_gate(self, now: float) -> Decision:
        if self._stage is GateStage.BEFORE_QUEUEING:
            if self._passed:
                return Decision(Verdict.QUEUE, max(now, self._queued_at + REQUEUE_BACKOFF))
            return Decision(Verdict.WAIT_FOR_CODE, now + self._poll)
        return Decision(Verdict.TAKE_OFFICE if self._passed else Verdict.LEAVE)

    def _after_office(self) -> Decision:
        if self._office is OfficeOutcome.TOOK:
            return Decision(Verdict.SERVE)
        if self._office is OfficeOutcome.READ_FAILED:
            return Decision(Verdict.FORGET)
        return Decision(Verdict.LEAVE, stale_server=self._office is OfficeOutcome.REFUSED)

    def _after_term(self) -> Decision:
        if self._stopping:
            return Decision(Verdict.STOP)
        if self._reason is not None and self._reason.resumable:
            return Decision(Verdict.CHECK_TERM)
        if self._reason is CancelReason.LOCK_NODE_DELETED:
            return Decision(Verdict.LEAVE, backoff=REQUEUE_BACKOFF)
        return Decision(Verdict.LEAVE)
