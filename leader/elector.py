"""The elector: queue on the lock, pass the code gate, take office, serve under a token.

One thread runs the cycle (docs/design.md, "Leadership"); each step records a reason in
words (``history``) that the daemon logs and tests assert, as Patroni's ``run_cycle`` does:
wait for a connection and the code gate; queue on kazoo's lock at ``<root>/leader-lock``;
on winning, gate again; take office (one fenced multi-op, the term's first beat); serve
under a token until SUSPENDED, LOST, our lock node deleted, a fenced write refused or
shutdown cancels it; on the same session with the node still there, resume, else queue
again. We claim only while an acknowledged beat's announced claim lasts (``claim``,
``leader.beat_lease``); the read lease (``lease``, 2/3 T) serves freshness and readiness.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import CancelledError, KazooException
from kazoo.recipe.lock import Lock

from fencing import (
    CancelReason,
    FencedWriter,
    FencingError,
    LeadershipToken,
    Membership,
    NotLeaderError,
    WriteConflictError,
    WriteOutcomeUnknown,
)
from fencing.lease import Heartbeat, Lease
from fencing.office import prune_epochs, take_office
from leader.heartbeat import Beater
from leader.settings import (
    ERROR_BACKOFF,
    REQUEUE_BACKOFF,
    CodeGate,
    Deposed,
    Elected,
    ElectorSettings,
    GateStage,
    History,
)
from leader.term import TermVerdict, judge_term, leave_lock, watch_lock_node

log = logging.getLogger(__name__)


class Elector:
    """Leadership of one replica. Thread-safe queries: ``is_leader``, ``epoch``, ``token``."""

    def __init__(
        self,
        client: KazooClient,
        settings: ElectorSettings,
        *,
        has_all_code: CodeGate,
        on_elected: Elected | None = None,
        on_deposed: Deposed | None = None,
        leader_hint: Callable[[], str | None] | None = None,
        taking_office: Callable[[bool], None] | None = None,
        on_stale_server: Callable[[str], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._client = client
        self._s = settings
        self._paths = settings.paths
        self._gate = has_all_code
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._leader_hint = leader_hint
        # Told True on winning the lock and False once in office (or not): background work
        # can step aside for the few round trips that decide how long there is no leader.
        self._taking_office = taking_office or (lambda _on: None)
        # Told when we won the lock on our server's view but the quorum refused the office:
        # our server is behind or diverged, and queueing on it again would only loop.
        self._on_stale_server = on_stale_server or (lambda _why: None)
        self._queued_at = float("-inf")
        self._wall_ms = wall_ms
        self._clock = clock
        self.lease = Lease(settings.session_timeout * 2 / 3, clock=clock)
        self.claim = Lease(settings.beats.leader_lease, clock=clock)
        self._heartbeat = Heartbeat(
            client,
            self.lease,
            path=settings.paths.root,
            interval=settings.session_timeout / 6,
            clock=clock,
        )
        self._stopping = threading.Event()
        self._wake = threading.Event()  # code may have arrived, or stop
        self._connected = threading.Event()
        self._lock_guard = threading.Lock()
        self._lock: Lock | None = None
        self._token: LeadershipToken | None = None
        self._epoch = 0
        self._history = History()
        self._running = True
        # The session of the current (or, while disconnected, the last) connection.
        self._session: int | None = None  # captured on CONNECTED (see ``_on_state``)
        self._thread = threading.Thread(target=self._run, name="elector", daemon=True)
        self.beater = Beater(
            client, self._paths, settings.replica_id, own_node=self.lock_node,
            lease=self.claim, interval=settings.beats.interval,
            timeout=settings.session_timeout, on_lock_gone=self._lock_gone, clock=clock,
        )  # fmt: skip

    # -- public -------------------------------------------------------------------------

    def start(self) -> None:
        self._client.add_listener(self._on_state)
        if self._client.state == KazooState.CONNECTED:
            self._on_state(KazooState.CONNECTED)
        self._heartbeat.start()
        self.beater.start()
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful hand-over: cancel the token, delete our lock node (the next replica wins
        within one round trip), stop the thread."""
        self._stopping.set()
        self._wake.set()
        with self._lock_guard:
            token, lock = self._token, self._lock
        leading = token is not None and not token.cancelled  # not a term ended before
        if token is not None:
            token.cancel(CancelReason.SHUTDOWN)
        if lock is not None:
            lock.cancel()
            if leading:
                # Hand over before the term's teardown (duties, callbacks) has run: with
                # the token cancelled nothing of this term claims, and the delete fails
                # every fenced write still in flight, so the next replica need not wait.
                self._release(lock)
        self._thread.join(timeout)
        self._release(lock)
        self.beater.stop()
        self._heartbeat.stop()
        self._client.remove_listener(self._on_state)

    def is_leader(self) -> bool:
        """Leader only with a live token *and* a fresh claim: an acknowledged beat sent
        less than L ago (DESIGN item 8), besides the read lease."""
        token = self._token
        return token is not None and not token.cancelled and self._claim_valid()

    def _claim_valid(self) -> bool:
        return self.claim.valid() and self.lease.valid()

    @property
    def epoch(self) -> int:
        """The epoch of the current or last term (0 before the first)."""
        return self._epoch

    @property
    def token(self) -> LeadershipToken | None:
        return self._token

    def queued_node(self) -> str | None:
        """Our lock node's path while we wait in the queue (None when leading or not queued)."""
        if self.is_leader():
            return None
        return self.lock_node()

    def lock_node(self) -> str | None:
        """Our lock node's path while queued or leading (what the beater beats)."""
        with self._lock_guard:
            lock = self._lock
        return None if lock is None else self._paths.lock_node_of(lock)

    def code_changed(self) -> None:
        """Tell the elector the code gate may pass now (instead of waiting for the poll)."""
        self._wake.set()

    @property
    def history(self) -> list[str]:
        """Each step of the cycle in words, oldest first (bounded)."""
        return self._history.entries()

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float) -> bool:
        """Block until ``predicate(history)`` holds; for callers and tests that need a step."""
        return self._history.wait_for(predicate, timeout)

    # -- the cycle ----------------------------------------------------------------------

    def _note(self, reason: str) -> None:
        log.info("%s: %s", self._s.replica_id, reason)
        self._history.add(reason)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._cycle()
                except (KazooException, FencingError) as e:
                    # A ZooKeeper hiccup between steps (or a write whose outcome it left
                    # unknown): start the cycle again; the thread must never die of it.
                    self._note(f"cycle interrupted by ZooKeeper: {type(e).__name__}")
                    self._stopping.wait(0.1)
                except Exception as e:
                    # Anything else (a disk, a damaged record): end the term and leave the
                    # queue, or our lock node would keep every other replica waiting.
                    log.exception("%s: elector error", self._s.replica_id)
                    self._note(f"elector error, left the queue: {type(e).__name__}: {e}")
                    self._abandon_term(f"{type(e).__name__}: {e}")
                    self._stopping.wait(ERROR_BACKOFF)
        finally:
            self._note("elector stopped")
            self._running = False

    @property
    def running(self) -> bool:
        """False once the elector thread has ended (stopped, or it could not go on)."""
        return self._running

    def _abandon_term(self, detail: str) -> None:
        """After an unexpected error: cancel the token and leave the queue if we can."""
        with self._lock_guard:
            token, lock = self._token, self._lock
        if token is not None:
            token.cancel(CancelReason.ELECTOR_ERROR, detail)
        self._release(lock)

    def _cycle(self) -> None:
        if not self._wait_connected():
            return
        if not self._gate_passes(GateStage.BEFORE_QUEUEING):
            return
        # A node of ours still queued (its release failed on a dropped connection) would
        # sit ahead of the new one: we would wait on ourselves, and everyone behind us.
        own = Membership(self._client, self._s.replica_id, timeout=self._s.session_timeout)
        for name in own.drop_session_nodes(self._paths.leader_lock):
            self._note(f"dropped our own leftover lock node {name}")
        # At most one queue attempt per REQUEUE_BACKOFF: every attempt fires the watch of
        # every replica behind us, and one that keeps failing must not spin.
        if self._stopping.wait(max(0.0, self._queued_at + REQUEUE_BACKOFF - self._clock())):
            return
        lock = Lock(self._client, self._paths.leader_lock, identifier=self._s.replica_id)
        with self._lock_guard:
            if self._stopping.is_set():
                return
            self._lock = lock
        self._queued_at = self._clock()
        self._note("queued for leadership")
        try:
            lock.acquire()
        except CancelledError:
            self._release(lock)
            return
        lock_node = self._paths.lock_node_of(lock)
        if lock_node is None:  # acquire() names the node it made; never seen without one
            raise RuntimeError("won the lock without a lock node")
        self._note(f"won the lock ({lock.node})")
        self._taking_office(True)
        try:
            epoch = self._office(lock, lock_node)
        finally:
            self._taking_office(False)
        if epoch is not None:
            self._serve(lock, lock_node, epoch)

    def _office(self, lock: Lock, lock_node: str) -> int | None:
        """The gate after winning, then the take-office multi-op: the new epoch, or None."""
        if self._stopping.is_set():
            return None
        if not self._gate_passes(GateStage.AFTER_WINNING):
            self._release(lock)
            return None
        sent = self._clock()
        lease, beat = self.beater.announce()
        try:
            epoch = take_office(
                self._client,
                self._paths,
                lock_node=lock_node,
                holder=self._s.replica_id,
                now_ms=self._wall_ms,
                timeout=self._s.session_timeout,
                beat=self._paths.beat(lock_node),
                beat_data=beat,
            )
        except (NotLeaderError, WriteConflictError, WriteOutcomeUnknown) as e:
            # Never keep the lock without the office: the queue behind would wait on us.
            self._note(f"could not take office: {e}")
            self._release(lock)
            if not isinstance(e, WriteOutcomeUnknown):
                # We won on our server's view and the quorum says otherwise.
                self._on_stale_server(f"won the lock but could not take office: {e}")
            return None
        except KazooException:
            # A read failed. Forget this lock without kazoo's release (it blocks until the
            # link is back); the next cycle drops its node first if the session survived.
            lock.is_acquired = False
            with self._lock_guard:
                if self._lock is lock:
                    self._lock = None
            raise
        self.claim.renew(sent, lease)  # the take-office multi-op is the term's first beat
        self._epoch = epoch
        self._note(f"took office, epoch {epoch}")
        return epoch

    def _serve(self, lock: Lock, lock_node: str, epoch: int) -> None:
        session = self._session
        resumed = False
        while True:
            token = LeadershipToken(lock_node, epoch)
            with self._lock_guard:
                self._token = token  # first: a disconnect from now on cancels this token
            if not self._connected.is_set():
                token.cancel(CancelReason.DISCONNECTED, "before the term started")
            watch_lock_node(self._client, token)
            if self._stopping.is_set():
                token.cancel(CancelReason.SHUTDOWN)
            writer = FencedWriter(
                self._client,
                token,
                timeout=self._s.session_timeout,
                leader_hint=self._leader_hint,
                lease_valid=self._claim_valid,
            )
            if resumed:
                # The leases lapsed with the connection: renew them before handing out the
                # writer, or the first writes of the resumed term would be refused.
                self._heartbeat.beat()
                self.beater.beat_now(wait=max(self.claim.duration, 3 * self.beater.latency()))
            else:
                try:
                    prune_epochs(writer, self._client, self._paths, keep=self._s.epochs_kept)
                except (NotLeaderError, WriteOutcomeUnknown, KazooException) as e:
                    log.warning("could not prune old epochs: %s", e)
            self._lead(epoch, token, writer)
            if self._stopping.is_set():
                return
            if token.reason is None or not token.reason.resumable:
                self._release(lock)
                if token.reason is CancelReason.LOCK_NODE_DELETED:
                    # Expired, or preempted by a successor that judged us gone: let the
                    # new leader settle before queueing again, so two never flap.
                    self._stopping.wait(REQUEUE_BACKOFF)
                return
            if not self._term_survived(lock, lock_node, session, epoch):
                return
            self._note(f"resumed, epoch {epoch}")
            resumed = True

    def _lead(self, epoch: int, token: LeadershipToken, writer: FencedWriter) -> None:
        """``on_elected``, the term, then ``on_deposed`` whatever happened: a failing
        ``on_elected`` must not leave the term's signs (role, label, metrics) on."""
        try:
            if not token.cancelled and self._on_elected is not None:
                self._on_elected(epoch, token, writer)
            token.wait()
        except BaseException as e:
            token.cancel(CancelReason.ELECTOR_ERROR, f"{type(e).__name__}: {e}")
            raise
        finally:
            self._note(f"deposed: {token.why}")
            if self._on_deposed is not None:
                self._on_deposed(token.why)

    def _term_survived(self, lock: Lock, lock_node: str, session: int | None, epoch: int) -> bool:
        """After a dropped connection: True to resume the term; False once it ended (the
        lock is then released). A ZooKeeper error while checking is more connection
        trouble: wait for the connection and check again, keeping the lock node."""
        while True:
            if not self._wait_connected():
                return False
            try:
                verdict = judge_term(
                    self._client, self._paths, lock_node=lock_node, epoch=epoch,
                    session_now=self._session, session_then=session, gate=self._gate,
                )  # fmt: skip
            except KazooException as e:
                self._note(f"checking the term after reconnecting failed: {type(e).__name__}")
                self._stopping.wait(0.1)
                continue
            if verdict is TermVerdict.RESUME:
                return True
            self._note(verdict.value)
            self._release(lock)
            return False

    # -- helpers ------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        """kazoo's listener thread: must not block. Connection trouble ends the term."""
        if state == KazooState.CONNECTED:
            # Read here, once per connection: kazoo's client_id is None while
            # disconnected, which must never read as "the session changed".
            client_id = self._client.client_id
            if client_id:
                self._session = int(client_id[0])
            self._connected.set()
            return
        self._connected.clear()
        self.lease.expire()
        self.claim.expire()
        token = self._token
        if token is not None:
            token.cancel(CancelReason.DISCONNECTED, f"connection {state}")
        self._wake.set()

    def _gate_passes(self, when: GateStage) -> bool:
        """Run the gate until it passes; False when stopping or the connection dropped."""
        waiting_noted = False
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                ok = self._gate()
            except KazooException as e:
                log.warning("code gate failed: %s", e)
                ok = False
            if ok:
                return True
            if not waiting_noted:
                self._note(f"waiting for code ({when.value})")
                waiting_noted = True
            if when is not GateStage.BEFORE_QUEUEING:
                return False  # never hold the lock while waiting: leave, wait, queue again
            self._wake.wait(self._s.gate_poll_interval)
            if not self._connected.is_set():
                return False
        return False

    def _wait_connected(self) -> bool:
        while not self._stopping.is_set():
            if self._connected.wait(0.2):
                return True
        return False

    def _lock_gone(self, lock_node: str) -> None:
        """A beat found our lock node gone (the beater's thread)."""
        token = self._token
        if token is not None and token.lock_node == lock_node:
            token.cancel(CancelReason.LOCK_NODE_DELETED, "seen by a beat")

    def _release(self, lock: Lock | None) -> None:
        """Leave the queue within a deadline (``leader.term.leave_lock``)."""
        if lock is None:
            return
        leave_lock(self._client, self._paths, lock, timeout=self._s.session_timeout / 3)
        with self._lock_guard:
            if self._lock is lock:
                self._lock = None
