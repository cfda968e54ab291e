"""A term's I/O: from a won lock to the end of the term (``Tenure``), leading it (the
owner's callbacks around the token's life), whether it survived a dropped connection (one
verdict), and the watch on its lock node."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.recipe.lock import Lock

from cluster.paths import Paths
from fencing import (
    CancelReason,
    FencedWriter,
    LeadershipToken,
    NotLeaderError,
    WriteConflictError,
    WriteOutcomeUnknown,
)
from fencing.office import office_outcome, prune_epochs, read_leader_epoch, take_office
from leader.cycle import CycleMachine, Decision, OfficeOutcome, TermVerdict, Verdict
from leader.fold import Fold
from leader.office_ahead import OfficeAhead
from leader.pulse import Pulse
from leader.read_ahead import DecidedAhead, WinnerReads
from leader.seat import Link, Seat
from leader.settings import CodeGate, ElectorCallbacks, ElectorSettings, GateStage

log = logging.getLogger(__name__)

#: Longest a stopping leader's teardown waits for its lock node's delete, and then for the
#: next replica's take-office, in seconds (each).
HAND_OVER_WAIT = 1.0


def lead_term(
    epoch: int,
    token: LeadershipToken,
    writer: FencedWriter,
    callbacks: ElectorCallbacks,
    *,
    note: Callable[[str], None],
    after_elected: Callable[[], object] | None = None,
    before_teardown: Callable[[], object] = lambda: None,
) -> None:
    """``on_elected``, the term until its token is cancelled, then ``on_deposed`` whatever
    happened: a failing ``on_elected`` must not leave the term's signs (role, label,
    metrics) on. ``after_elected``: the term's housekeeping, once the duties run;
    ``before_teardown``: what ``on_deposed`` waits for (a stop's delete)."""
    try:
        if not token.cancelled and callbacks.on_elected is not None:
            callbacks.on_elected(epoch, token, writer)
        if not token.cancelled and after_elected is not None:
            after_elected()
        token.wait()
    except BaseException as e:
        token.cancel(CancelReason.ELECTOR_ERROR, f"{type(e).__name__}: {e}")
        raise
    finally:
        before_teardown()
        note(f"deposed: {token.why}")
        callbacks.on_deposed(token.why)


def _failed(e: Exception) -> OfficeOutcome:
    """A take-office that wrote nothing (refused), or whose outcome is unknown."""
    return OfficeOutcome.UNKNOWN if isinstance(e, WriteOutcomeUnknown) else OfficeOutcome.REFUSED


def judge_term(
    client: KazooClient,
    paths: Paths,
    *,
    lock_node: str,
    epoch: int,
    session_now: int | None,
    session_then: int | None,
    gate: CodeGate,
) -> TermVerdict:
    """Raises ``KazooException`` on connection trouble: more trouble, not a verdict."""
    if session_now != session_then or not client.exists(lock_node):
        return TermVerdict.LOST
    current, _ = read_leader_epoch(client, paths)
    if current is None or current.epoch != epoch or current.lock_node != lock_node:
        return TermVerdict.NOT_NAMED
    if not gate():
        return TermVerdict.NO_CODE
    return TermVerdict.RESUME


def watch_lock_node(client: KazooClient, token: LeadershipToken) -> None:
    """Cancel ``token`` when its lock node goes (re-armed after every other event)."""

    def watch(event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            token.cancel(CancelReason.LOCK_NODE_DELETED)
        elif not token.cancelled and event.type != EventType.NONE:
            watch_lock_node(client, token)

    try:
        if client.exists(token.lock_node, watch=watch) is None:
            token.cancel(CancelReason.LOCK_NODE_DELETED)
    except ConnectionLoss:
        # Connection trouble, not an ended term: end it as a disconnect does, so the
        # term can resume once the session proves intact.
        token.cancel(CancelReason.DISCONNECTED, "while watching own lock node")
    except KazooException as e:
        token.cancel(CancelReason.WATCH_FAILED, type(e).__name__)


class Tenure:
    """From a won lock to the end of its term: the gate after winning, take office, serve
    under a token, resume after a dropped connection on the same session; and leave the
    queue whenever the term ends (``leader.cycle`` decides which). One thread: the
    elector's."""

    def __init__(
        self,
        client: KazooClient,
        settings: ElectorSettings,
        callbacks: ElectorCallbacks,
        *,
        machine: CycleMachine,
        seat: Seat,
        link: Link,
        pulse: Pulse,
        stopping: threading.Event,
        gate: Callable[[GateStage, WinnerReads | None], Decision | None],
        note: Callable[[str], None],
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
        released: threading.Event,
        fold: Fold,
    ) -> None:
        self._client, self._s, self._paths, self._do = client, settings, settings.paths, callbacks
        self._machine, self._seat, self._link, self._pulse = machine, seat, link, pulse
        self._stopping, self._gate, self._note = stopping, gate, note
        self._clock, self._wall_ms = clock, wall_ms
        self._released, self._fold = released, fold
        self.epoch = 0  # of the current or last term (0 before the first)
        self.ahead = OfficeAhead(
            client, settings, callbacks, pulse=pulse, fold=fold, stopping=stopping,
            step_aside=self._step_aside, wall_ms=wall_ms,
        )  # fmt: skip

    def _step_aside(self, reads: WinnerReads | None) -> str | None:
        try:
            if reads is not None and self._do.step_aside_given is not None:
                return self._do.step_aside_given(reads.handover, reads.office.leader_epoch)
            return self._do.step_aside()
        except KazooException as e:  # advisory: a handover we cannot read is not one
            log.warning("could not read a handover: %s", e)
            return None

    def run(
        self,
        lock: Lock,
        lock_node: str,
        reads: WinnerReads | None,
        ahead: DecidedAhead | None = None,
    ) -> None:
        """We won ``lock``: take office and serve; return once the term ended. ``reads``:
        those sent behind the winning listing (``leader.read_ahead``), None to read now;
        ``ahead``: what was decided at the deletion (``leader.office_ahead``)."""
        self._do.taking_office(True)
        try:
            epoch = self._office(lock, lock_node, reads, ahead)
        finally:
            self._do.taking_office(False)
        if epoch is not None:
            self._serve(lock, lock_node, epoch)

    def _office(
        self, lock: Lock, lock_node: str, reads: WinnerReads | None, ahead: DecidedAhead | None
    ) -> int | None:
        """The gate after winning, then the take-office multi-op: the new epoch, or None."""
        if ahead is not None and ahead.attempt is None:  # decided at the deletion
            self._note(f"stepped aside: {ahead.aside}")
            self._seat.release(lock)
            return None
        if ahead is not None and ahead.attempt is not None:  # sent at the deletion
            try:
                epoch = office_outcome(ahead.attempt, timeout=self._s.session_timeout)
            except (NotLeaderError, WriteConflictError, WriteOutcomeUnknown) as e:
                self._office_failed(lock, _failed(e), e)
                return None
            if epoch is not None:
                return self._took(ahead.sent, ahead.lease, epoch)
            self._note("the take-office sent at the deletion conflicted: deciding again")
            reads = None  # from fresh reads
        if self._stopping.is_set():
            return None
        folded = self._fold.take(lock_node, timeout=self._s.session_timeout)
        if folded is not None:  # the preemption's multi-op took office (and beat) for us
            how = " (in the preemption's multi-op)"
            return self._took(folded.sent, folded.lease, folded.epoch, how)
        gate = self._gate(GateStage.AFTER_WINNING, reads)
        if gate is None or gate.verdict is not Verdict.TAKE_OFFICE:
            self._seat.release(lock)  # never hold the lock while waiting for code
            return None
        aside = self._step_aside(reads)
        if aside is not None:  # a planned handover to a replica behind us
            self._note(f"stepped aside: {aside}")
            self._seat.release(lock)
            return None
        sent, lease, beat = self._pulse.announce()
        try:
            epoch = take_office(
                self._client, self._paths, lock_node=lock_node, holder=self._s.replica_id,
                now_ms=self._wall_ms, timeout=self._s.session_timeout,
                beat=self._paths.beat(lock_node), beat_data=beat,
                reads=None if reads is None else reads.office,
                beat_exists=self._pulse.beat_made(lock_node),
            )  # fmt: skip
        except (NotLeaderError, WriteConflictError, WriteOutcomeUnknown) as e:
            self._office_failed(lock, _failed(e), e)
            return None
        except KazooException as e:
            self._office_failed(lock, OfficeOutcome.READ_FAILED, e)
            raise
        return self._took(sent, lease, epoch)

    def _took(self, sent: float, lease: float, epoch: int, how: str = "") -> int:
        self._pulse.renew(sent, lease)  # the take-office multi-op is the term's first beat
        self.epoch = epoch
        self._note(f"took office, epoch {epoch}{how}")
        return epoch

    def _office_failed(self, lock: Lock, outcome: OfficeOutcome, e: Exception) -> None:
        """Leave the queue (or, its link down, forget the lock) after a failed take-office."""
        self._machine.office(outcome)
        decision = self._machine.decide(self._clock())
        if decision.verdict is Verdict.FORGET:
            self._seat.forget(lock)  # not kazoo's release: it blocks until the link is back
            return
        # Never keep the lock without the office: the queue behind would wait on us.
        self._note(f"could not take office: {e}")
        self._seat.release(lock)
        if decision.stale_server:
            self._do.on_stale_server(f"won the lock but could not take office: {e}")

    def _serve(self, lock: Lock, lock_node: str, epoch: int) -> None:
        session = self._link.session
        resumed = False
        while True:
            token = LeadershipToken(lock_node, epoch)
            self._seat.begin(token)  # first: a disconnect from now on cancels this token
            if not self._link.connected():
                token.cancel(CancelReason.DISCONNECTED, "before the term started")
            watch_lock_node(self._client, token)
            if self._stopping.is_set():
                token.cancel(CancelReason.SHUTDOWN)
            writer = FencedWriter(
                self._client, token, timeout=self._s.session_timeout,
                leader_hint=self._do.leader_hint, lease_valid=self._pulse.valid,
            )  # fmt: skip
            if resumed:
                # The leases lapsed with the connection: renew them before handing out the
                # writer, or the first writes of the resumed term would be refused.
                self._pulse.renew_now()
            lead_term(
                epoch, token, writer, self._do, note=self._note,
                after_elected=None if resumed else functools.partial(self._prune, writer),
                before_teardown=self._hand_over_first,
            )  # fmt: skip
            self._machine.term_ended(token.reason, stopping=self._stopping.is_set())
            decision = self._machine.decide(self._clock())
            if decision.verdict is Verdict.STOP:
                return
            if decision.verdict is Verdict.LEAVE:
                self._seat.release(lock)
                self._stopping.wait(decision.backoff)  # after a deletion: the new leader settles
                return
            if not self._term_survived(lock, lock_node, session, epoch):
                return
            self._note(f"resumed, epoch {epoch}")
            resumed = True

    def _prune(self, writer: FencedWriter) -> None:
        """After ``on_elected``: a read and a write that, before the duties, delayed them
        (and every read queued behind) by three fsyncs' wait on a slow ZooKeeper."""
        try:
            prune_epochs(writer, self._client, self._paths, keep=self._s.epochs_kept)
        except (NotLeaderError, WriteOutcomeUnknown, KazooException) as e:
            log.warning("could not prune old epochs: %s", e)

    def _hand_over_first(self) -> None:
        """A stopping leader's teardown (duties, registry, labels: requests and CPU) waits
        until its lock node's delete is out: the next replica's take-office is not queued
        behind it (bounded: a stop that hangs is the shutdown grace's business)."""
        if self._stopping.is_set():
            self._released.wait(HAND_OVER_WAIT)

    def _term_survived(self, lock: Lock, lock_node: str, session: int | None, epoch: int) -> bool:
        """After a dropped connection: True to resume the term; False once it ended (the
        lock is then released). A ZooKeeper error while checking is more connection
        trouble: wait for the connection and check again, keeping the lock node."""
        while self._link.wait(self._stopping):
            try:
                verdict = judge_term(
                    self._client, self._paths, lock_node=lock_node, epoch=epoch,
                    session_now=self._link.session, session_then=session,
                    gate=self._do.has_all_code,
                )  # fmt: skip
            except KazooException as e:
                self._note(f"checking the term after reconnecting failed: {type(e).__name__}")
                verdict = None
            self._machine.term_checked(verdict)
            decision = self._machine.decide(self._clock())
            if decision.verdict is Verdict.RESUME:
                return True
            if decision.verdict is Verdict.LEAVE and verdict is not None:
                self._note(verdict.value)
                self._seat.release(lock)
                return False
            self._stopping.wait(decision.backoff)  # CHECK_TERM again
        return False
