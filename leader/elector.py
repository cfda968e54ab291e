"""The elector: the thin loop around kazoo that runs the cycle ``leader.cycle`` decides.

One thread runs the cycle (docs/design.md, "Leadership"): wait for a connection and the
code gate; queue on kazoo's lock at ``<root>/leader-lock``; on winning, gate again; take
office (one fenced multi-op, the term's first beat); serve under a token until SUSPENDED,
LOST, our lock node deleted, a fenced write refused or shutdown cancels it; on the same
session with the node still there, resume, else queue again. What follows each step is the
decision of ``CycleMachine``; this module does the I/O in the order safety needs: the token
is cancelled before the lock node is deleted, and a failed take-office always leaves the
queue. Each step is recorded in words (``history``), which the daemon logs and tests
assert. The take-office and the term are ``leader.term.Tenure``; our place in the queue and
our connection, ``leader.seat``; the claim and the read lease (``lease``, 2/3 T, for
freshness and readiness), ``leader.pulse``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import CancelledError, KazooException
from kazoo.interfaces import IAsyncResult

from fencing import CancelReason, FencingError, LeadershipToken, Membership
from leader.cycle import CycleMachine, Decision, Verdict
from leader.fold import Draft, Fold
from leader.heartbeat import BeatListener
from leader.pulse import Pulse
from leader.read_ahead import WinnerReads, queue_lock
from leader.seat import Link, Seat, Successor
from leader.settings import ElectorCallbacks, ElectorSettings, GateStage, History
from leader.term import HAND_OVER_WAIT, Tenure

log = logging.getLogger(__name__)


class Elector:
    """Leadership of one replica. Thread-safe queries: ``is_leader``, ``epoch``, ``token``."""

    def __init__(
        self,
        client: KazooClient,
        settings: ElectorSettings,
        callbacks: ElectorCallbacks,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._client, self._s, self._paths, self._do = client, settings, settings.paths, callbacks
        self._machine = CycleMachine(gate_poll_interval=settings.gate_poll_interval)
        self._clock = clock
        self._stopping = threading.Event()
        self._wake = threading.Event()  # code may have arrived, or stop
        self._seat = Seat(client, self._paths, release_timeout=settings.session_timeout / 3)
        self._link = Link(client, on_lost=self._connection_lost)
        self._released = threading.Event()  # a stop left the queue
        self._pulse = Pulse(
            client, settings, own_node=self._seat.lock_node, on_lock_gone=self._lock_gone,
            clock=clock, probe=callbacks.probe,
        )  # fmt: skip
        self.lease = self._pulse.lease  # the read lease: freshness and readiness
        self._history = History()
        self.fold = Fold(clock)  # a term the silence watch's preemption took for us
        self._tenure = Tenure(
            client, settings, callbacks, machine=self._machine, seat=self._seat,
            link=self._link, pulse=self._pulse, stopping=self._stopping, gate=self._gate,
            note=self._note, clock=clock, wall_ms=wall_ms, released=self._released,
            fold=self.fold,
        )  # fmt: skip
        self._running = True
        self._thread = threading.Thread(target=self._run, name="elector", daemon=True)

    # -- public -------------------------------------------------------------------------

    def start(self) -> None:
        self._link.start()
        self._pulse.start()
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful hand-over: cancel the token, delete our lock node (the next replica wins
        within one round trip), stop the thread."""
        self._stopping.set()
        self._wake.set()
        token, lock = self._seat.held()
        leading = token is not None and not token.cancelled  # not a term ended before
        if token is not None:
            token.cancel(CancelReason.SHUTDOWN)
        node = self._seat.lock_node()
        if lock is not None:
            lock.cancel()
            if leading and node is not None:
                # Hand over before the term's teardown (duties, callbacks) has run: with
                # the token cancelled nothing of this term claims, and the delete fails
                # every fenced write still in flight, so the next replica need not wait.
                # The teardown then waits for its take-office (bounded), not beside it.
                successor: list[Successor] = []

                def arm(node: str = node) -> None:  # behind the delete, not ahead of it
                    successor.append(Successor(self._client, self._paths, node))

                self._seat.release(lock, then=arm)
                if successor:
                    successor[0].wait(HAND_OVER_WAIT)
        self._released.set()
        self._thread.join(timeout)
        self._seat.release(lock)
        self._pulse.stop()
        self._link.stop()

    def is_leader(self) -> bool:
        """Leader only with a live token *and* a fresh claim: an acknowledged beat sent
        less than L ago (DESIGN item 8), besides the read lease."""
        token = self._seat.token
        return token is not None and not token.cancelled and self._pulse.valid()

    @property
    def epoch(self) -> int:
        """The epoch of the current or last term (0 before the first)."""
        return self._tenure.epoch

    @property
    def token(self) -> LeadershipToken | None:
        return self._seat.token

    def queued_node(self) -> str | None:
        """Our lock node's path while we wait in the queue (None when leading or not queued)."""
        return None if self.is_leader() else self._seat.lock_node()

    def draft_office(self, storms: IAsyncResult) -> Draft | None:
        """What a preemption needs to take office for us in its own multi-op (``leader.fold``);
        None when it may not: stopping, not queued, in a term, or the code gate does not
        pass. ``storms``: the stat of ``/storms``, sent with the preemption's reads."""
        token = self._seat.token
        node = self._seat.lock_node()
        if self._stopping.is_set() or node is None or (token is not None and not token.cancelled):
            return None
        try:
            if self._do.gate_given is not None:
                ok = self._do.gate_given(storms)
            else:
                ok = self._do.has_all_code()
        except KazooException as e:
            log.info("code gate failed before a preemption: %r", e)
            return None
        if not ok:
            return None
        sent, lease, beat = self._pulse.announce()
        return Draft(node, sent, lease, beat, self._pulse.beat_made(node))

    def code_changed(self) -> None:
        """Tell the elector the code gate may pass now (instead of waiting for the poll)."""
        self._wake.set()

    def beat_latency(self) -> float:
        """The round trip of our beats that ZooKeeper's latency is judged by, in seconds."""
        return self._pulse.latency()

    def on_beat(self, listener: BeatListener) -> None:
        """Call ``listener`` with each of our acknowledged beats (the beater's thread)."""
        self._pulse.on_beat(listener)

    def on_stall(self, after: Callable[[], float], callback: Callable[[float], object]) -> None:
        """Call ``callback(seconds)`` when our oldest beat in flight is unanswered for
        ``after()`` seconds on a connection that stays up, and again as that wait grows
        (``leader.heartbeat.Beater.on_stall``)."""
        self._pulse.on_stall(after, callback)

    @property
    def history(self) -> list[str]:
        """Each step of the cycle in words, oldest first (bounded)."""
        return self._history.entries()

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float) -> bool:
        """Block until ``predicate(history)`` holds; for callers and tests that need a step."""
        return self._history.wait_for(predicate, timeout)

    @property
    def running(self) -> bool:
        """False once the elector thread has ended (stopped, or it could not go on)."""
        return self._running

    # -- the cycle ----------------------------------------------------------------------

    def _note(self, reason: str) -> None:
        log.info("%s: %s", self._s.replica_id, reason)
        self._history.add(reason)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._cycle()
                except Exception as e:  # the thread must never die of a surprise
                    self._cycle_failed(e)
        finally:
            self._note("elector stopped")
            self._running = False

    def _cycle_failed(self, e: Exception) -> None:
        """A ZooKeeper hiccup between steps (or a write it left unknown): start again soon.
        Anything else (a disk, a damaged record): end the term and leave the queue, or our
        lock node would keep every other replica waiting; then back off."""
        zookeeper = isinstance(e, KazooException | FencingError)
        if zookeeper:
            self._note(f"cycle interrupted by ZooKeeper: {type(e).__name__}")
        else:
            log.exception("%s: elector error", self._s.replica_id)
            self._note(f"elector error, left the queue: {type(e).__name__}: {e}")
        self._machine.failed(zookeeper=zookeeper)
        decision = self._machine.decide(self._clock())
        if decision.verdict is Verdict.ABANDON:
            token, lock = self._seat.held()
            if token is not None:
                token.cancel(CancelReason.ELECTOR_ERROR, f"{type(e).__name__}: {e}")
            self._seat.release(lock)
        self._stopping.wait(decision.backoff)

    def _cycle(self) -> None:
        if not self._link.wait(self._stopping):
            return
        queue = self._gate(GateStage.BEFORE_QUEUEING)
        if queue is None:
            return
        # A node of ours still queued (its release failed on a dropped connection) would
        # sit ahead of the new one: we would wait on ourselves, and everyone behind us.
        own = Membership(self._client, self._s.replica_id, timeout=self._s.session_timeout)
        for name in own.drop_session_nodes(self._paths.leader_lock):
            self._note(f"dropped our own leftover lock node {name}")
        if self._wait_until(queue.wake_at):  # at most one attempt per REQUEUE_BACKOFF
            return
        lock = queue_lock(
            self._client, self._paths, self._s.replica_id, self.fold, self._tenure.ahead.send
        )
        if not self._seat.take(lock, self._stopping):
            return
        self._machine.queued(self._clock())
        self._note("queued for leadership")
        try:
            lock.acquire()
        except CancelledError:
            self._seat.release(lock)
            return
        lock_node = self._paths.lock_node_of(lock)
        if lock_node is None:  # acquire() names the node it made; never seen without one
            raise RuntimeError("won the lock without a lock node")
        ahead_went = ", the node ahead went: no listing" if lock.skipped_listing else ""
        self._note(f"won the lock ({lock.node}{ahead_went})")
        self._tenure.run(lock, lock_node, lock.reads, lock.office)

    # -- helpers ------------------------------------------------------------------------

    def _connection_lost(self, state: str) -> None:
        """kazoo's listener thread: must not block. Connection trouble ends the term."""
        self._pulse.expire()
        token = self._seat.token
        if token is not None:
            token.cancel(CancelReason.DISCONNECTED, f"connection {state}")
        self._wake.set()

    def _gate(self, stage: GateStage, reads: WinnerReads | None = None) -> Decision | None:
        """Ask the code gate until the machine says what next (``QUEUE``, ``TAKE_OFFICE``
        or ``LEAVE``); None when stopping or the connection dropped while waiting. With
        ``reads`` (sent behind the winning listing) its first answer is from them."""
        waiting_noted = False
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                if reads is not None and self._do.gate_given is not None:
                    ok = self._do.gate_given(reads.storms)
                else:
                    ok = self._do.has_all_code()
                reads = None  # asked again (never after winning): read afresh
            except KazooException as e:
                log.warning("code gate failed: %s", e)
                ok = False
            self._machine.gate(stage, ok)
            decision = self._machine.decide(self._clock())
            if not ok and not waiting_noted:
                self._note(f"waiting for code ({stage.value})")
                waiting_noted = True
            if decision.verdict is not Verdict.WAIT_FOR_CODE:
                return decision
            self._wait_until(decision.wake_at, self._wake)
            if not self._link.connected():
                return None
        return None

    def _wait_until(self, at: float | None, event: threading.Event | None = None) -> bool:
        """Wait until ``at`` on our clock (None: not at all) or ``event`` (default: stop)."""
        event = self._stopping if event is None else event
        return event.wait(0.0 if at is None else max(0.0, at - self._clock()))

    def _lock_gone(self, lock_node: str) -> None:
        """A beat found our lock node gone (the beater's thread)."""
        token = self._seat.token
        if token is not None and token.lock_node == lock_node:
            token.cancel(CancelReason.LOCK_NODE_DELETED, "seen by a beat")
