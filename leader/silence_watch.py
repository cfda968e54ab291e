"""Silence preemption, the I/O around ``leader.silence``: a paused or cut-off replica in
front of ours is removed from the queue in about P seconds, not a session timeout.

One thread feeds the state machine what it reads (the beat node of the lock node just in
front of ours, with the claim that beat announced, re-read when its watch fires), what the
kazoo listener and our beater report, and whether the leader's process is heard dead
(``leader.peer_link``), then sleeps until the machine's next decision time: a timer, not a
polling loop. On SILENT it syncs (with a deadline that follows our own latency), reads the
beat node again, looks at the link again, gives up if the version moved or the evidence
went, and deletes the silent lock node in one multi-op fenced on the version it watched
and on ``/leader-epoch`` (``fencing.beats.preempt_silent``). A stale view fails that check
at ZooKeeper's leader: safe, only later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import WatchedEvent

from cluster.api import records
from cluster.paths import Paths
from cluster.threads import guarded_thread
from fencing import txn
from fencing.beats import (
    PreemptOutcome,
    announced_lease,
    preempt_beatless,
    preempt_into_office,
    preempt_silent,
)
from fencing.errors import FencingError
from fencing.office import leader_epoch_of, next_epoch, office_ops
from leader.discovery import LeaderCache
from leader.fold import Draft, Fold, FoldedOffice
from leader.heartbeat import BeatAck
from leader.peer_link import PeerLink
from leader.preempt_reads import PreemptReads, ReadsAhead, send_preempt_reads
from leader.settings import BeatSettings
from leader.silence import ABSENT, Decision, SilenceMachine, Verdict

log = logging.getLogger(__name__)

#: Bound on the sync and the reads that verify silence before acting on it, at least: they
#: queue behind our own beats in flight (one session is answered in order), so the bound
#: grows with the claim our own beats announce.
VERIFY_DEADLINE = 1.0
#: Wait this long after a failed attempt before deciding again (no spinning on an error).
RETRY_BACKOFF = 0.2
#: With nothing to time, look again this often anyway (an input lost to a race).
IDLE_RECHECK = 1.0


class SilenceWatch:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        cache: LeaderCache,
        own_node: Callable[[], str | None],
        settings: BeatSettings,
        *,
        timeout: float,
        heard_dead_after: float = 0.0,
        link_retry: float = 0.1,
        on_preempt: Callable[[str], None] | None = None,
        on_stale_server: Callable[[str], object] | None = None,
        draft: Callable[[IAsyncResult], Draft | None] | None = None,
        fold: Fold | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        # Both given: a preemption of the term's holder takes office in its multi-op.
        self._draft, self._fold = draft, fold
        self._reads_ahead = ReadsAhead()  # the preemption's reads, sent before the window ends
        self._on_stale_server = on_stale_server
        self._paths = paths
        self._id = replica_id
        self._cache = cache
        self._own_node = own_node
        self._timeout = timeout
        self._on_preempt = on_preempt
        self._clock = clock
        self._enabled = settings.silence_window > 0
        # A window of 0 turns the watch off: never started.
        self._machine = SilenceMachine(settings if self._enabled else BeatSettings())
        self._own_lease = settings.leader_lease
        # 0 turns the heard-dead evidence off: the full window always.
        self._link: PeerLink | None = (
            PeerLink(self._poke, dead_after=heard_dead_after, retry=link_retry, clock=clock)
            if heard_dead_after > 0
            else None
        )
        self._guard = threading.Lock()  # inputs come from kazoo's threads and the beater
        self._stale = True  # the target's beat node must be read again
        self._owner: tuple[str, int] | None = None  # a lock node and its session
        # The target must be proved at the quorum (a new one, or after a reconnect: the
        # server we came back to may show a node the quorum lacks, ZOOKEEPER-4837/-5010).
        self._verify = True
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.last: Decision = Decision(Verdict.IDLE)  # for tests and logs
        self._thread = guarded_thread("silence-watch", self._run, self._stop)

    def start(self) -> None:
        if not self._enabled:
            return
        self._client.add_listener(self._on_state)
        self._on_state(self._client.state)
        self._cache.add_listener(self._poke)
        if self._link is not None:
            self._link.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._link is not None:
            self._link.stop()
        if self._enabled:
            self._client.remove_listener(self._on_state)

    # -- inputs (any thread; never block) -------------------------------------------------

    def beat_acked(self, ack: BeatAck) -> None:
        with self._guard:
            self._machine.own_beat(ack.sent, ack.acked, ack.lease)
            self._own_lease = ack.lease
        self._reads_ahead.beat_acked(ack.sent, ack.acked)
        self._wake.set()

    def _deadline(self) -> float:
        """For the reads that verify: they wait behind our own beats in flight."""
        return max(VERIFY_DEADLINE, self._own_lease)

    def _on_state(self, state: str) -> None:
        with self._guard:
            self._machine.connection(state == KazooState.CONNECTED, self._clock())
            self._stale = True  # watches may have been lost with the session
            self._verify = True
        self._wake.set()

    def _poke(self) -> None:
        self._wake.set()

    def _on_beat_event(self, event: WatchedEvent) -> None:
        with self._guard:
            self._stale = True
        self._wake.set()

    # -- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                decision = self._step()
                self._read_ahead(decision)
            except (KazooException, KazooTimeoutError, FencingError) as e:
                log.info("silence watch interrupted: %r", e)
                with self._guard:
                    self._stale = True
                self._stop.wait(RETRY_BACKOFF)
                continue
            self.last = decision
            if decision.verdict is Verdict.SILENT:
                try:
                    done = self._preempt(decision)
                except (KazooException, KazooTimeoutError, FencingError) as e:
                    log.info("%s: preempting %s interrupted: %r", self._id, decision.target, e)
                    done = False
                if not done:
                    with self._guard:
                        self._stale = True
                    self._stop.wait(RETRY_BACKOFF)
                continue
            wait = IDLE_RECHECK
            if decision.wake_at is not None:
                wait = min(wait, max(0.0, decision.wake_at - self._clock()))
            self._wake.wait(wait)

    def _step(self) -> Decision:
        target = self._target()
        with self._guard:
            if target != self._machine.target:
                self._machine.watch(target, self._clock())
                self._stale = self._verify = True
            read = self._stale and target is not None
            verify = self._verify and target is not None
            self._stale = False
        if verify and target is not None:
            # Not waiting a silence window behind a node only our server shows.
            if not txn.exists_at_quorum(self._client, target, timeout=self._deadline()):
                self._accuse_our_server(target)
            with self._guard:
                self._verify = False
        address = self._address_of(target)
        if self._link is not None:
            self._link.follow(address)
        if read and target is not None:
            version, announced = self._read_beat(target, watch=True)
            with self._guard:
                self._machine.saw(target, version, self._clock(), announced)
        dead = target is not None and self._dead(target, address, fresh=False)
        with self._guard:
            if target is not None:
                self._machine.peer_dead(target, dead)
            return self._machine.decide(self._clock())

    def _dead(self, target: str, address: str | None, *, fresh: bool) -> bool:
        """The target's process is heard dead: its link closed and reconnects failing, or
        a new process serves its address (``_replaced``)."""
        if address is None or self._link is None:
            return False
        return self._link.dead(address) or self._replaced(target, address, fresh=fresh)

    def _replaced(self, target: str, address: str, *, fresh: bool) -> bool:
        """``/nimbuses/<address>`` belongs to another session than ``target`` (a pod
        restarted in place: its connects succeed, so its link is never heard dead). From
        the cache and one read of the lock node's owner per target while watching; from
        ZooKeeper itself, after a sync, before acting on it (a cache can hold a
        registration replaced while it was disconnected, which once deposed a live
        leader)."""
        if fresh:
            # Sent together, answered in order after the sync: one wait, not three.
            deadline = self._deadline()
            synced = self._client.sync_async(self._paths.nimbuses)
            held_read = self._client.exists_async(target)
            node_read = self._client.exists_async(self._paths.nimbus(address))
            synced.get(timeout=deadline)
            held, node = held_read.get(timeout=deadline), node_read.get(timeout=deadline)
            return (
                held is not None
                and node is not None
                and (int(held.ephemeralOwner) != int(node.ephemeralOwner))
            )
        if self._owner is None or self._owner[0] != target:
            stat = self._client.exists(target)
            if stat is None:
                return False
            self._owner = (target, int(stat.ephemeralOwner))
        registered = self._cache.nimbus_session(address)
        return registered is not None and registered != self._owner[1]

    def _read_beat(
        self, target: str, *, watch: bool, sent: IAsyncResult | None = None
    ) -> tuple[int | None, float | None]:
        """The beat node's version and the claim it announced (None, None: no node). The
        data and the version come from one read, so they belong together."""
        beat = self._paths.beat(target)
        try:
            if watch:
                data, stat = self._client.get(beat, watch=self._on_beat_event)
            else:
                data, stat = (sent or self._client.get_async(beat)).get(timeout=self._deadline())
        except NoNodeError:
            if watch:  # watch for its creation
                self._client.exists(beat, watch=self._on_beat_event)
            return None, None
        return stat.version, announced_lease(data)

    def _address_of(self, target: str | None) -> str | None:
        """The leader's address when ``target`` is the leader's lock node (a queued
        replica's address is not published)."""
        leader = self._cache.leader()
        if target is None or leader is None or leader.address == self._id:
            return None
        if leader.lock_node.rsplit("/", 1)[-1] != target.rsplit("/", 1)[-1]:
            return None
        return leader.address

    def _accuse_our_server(self, target: str) -> None:
        """The quorum has no ``target``, which our server showed us after a sync: if it
        still shows it now, our server is behind its quorum (ZOOKEEPER-4837, -5010) and we
        ask to move; if it no longer does, the node's own delete raced ours: no evidence."""
        self._client.sync_async(target).get(timeout=self._deadline())
        if self._client.exists_async(target).get(timeout=self._deadline()) is None:
            return
        evidence = f"it shows {target}, which its quorum does not have"
        log.warning("%s: our ZooKeeper server is behind: %s", self._id, evidence)
        if self._on_stale_server is not None:
            self._on_stale_server(evidence)

    def _target(self) -> str | None:
        """The lock node just in front of ours (the leader's, or a queued one's)."""
        mine = self._own_node()
        if mine is None:
            return None
        queue = self._cache.lock_queue()
        name = mine.rsplit("/", 1)[-1]
        if name not in queue or queue.index(name) == 0:
            return None
        return self._paths.lock_node(queue[queue.index(name) - 1])

    def _send_reads(self, target: str, version: int, now: float) -> PreemptReads:
        # The code gate's "now" and the epoch listing too, if we may take office in the delete.
        folding = self._fold is not None and version != ABSENT and self._at_head(target)
        return send_preempt_reads(
            self._client, self._paths, target, version, now=now, folding=folding
        )

    def _read_ahead(self, decision: Decision) -> None:
        """While watching: send the preemption's reads once the window's end is nearer
        than two of our round trips (they wait behind our beats in flight)."""
        target, version, end = decision.target, decision.version, decision.wake_at
        if decision.verdict is not Verdict.WATCHING or target is None or version is None:
            return
        now = self._clock()
        if end is not None and self._reads_ahead.due(target, version, end, now):
            self._reads_ahead.hold(self._send_reads(target, version, now))

    def _at_head(self, target: str) -> bool:
        """``target`` heads the lock queue (as our cache shows it): the term's holder."""
        queue = self._cache.lock_queue()
        return bool(queue) and queue[0] == target.rsplit("/", 1)[-1]

    def _into_office(
        self,
        target: str,
        version: int,
        current: records.LeaderEpoch,
        epoch_version: int,
        storms: IAsyncResult,
        epochs: IAsyncResult,
    ) -> PreemptOutcome | None:
        """Preempt the holder ``target`` and take office in one multi-op (``leader.fold``);
        None when the elector may not take office now (then preempt only)."""
        assert self._draft is not None and self._fold is not None
        draft = self._draft(storms)
        if draft is None:
            return None
        epoch = next_epoch(current, epochs)
        office, _ = office_ops(
            self._paths, lock_node=draft.lock_node, holder=self._id, epoch=epoch,
            epoch_version=epoch_version, started_ms=int(time.time() * 1000), last_term="",
            beat=self._paths.beat(draft.lock_node), beat_data=draft.beat,
            beat_exists=draft.beat_exists,
        )  # fmt: skip
        taken: FoldedOffice | None = None
        self._fold.begin(draft.lock_node)
        try:
            outcome = preempt_into_office(
                self._client, self._paths, lock_node=target, beat_version=version,
                office=office, timeout=self._timeout,
            )  # fmt: skip
            if outcome is PreemptOutcome.DELETED:
                taken = FoldedOffice(draft.lock_node, epoch, draft.sent, draft.lease)
        finally:
            self._fold.end(taken)
        if outcome is PreemptOutcome.OFFICE_REFUSED:
            log.info("%s: taking office with the preemption refused: preempting only", self._id)
        return outcome

    def _preempt_only(self, target: str, version: int, epoch_version: int) -> PreemptOutcome:
        if version == ABSENT:  # queued, never beat: frozen before its first beat
            return preempt_beatless(
                self._client, self._paths, lock_node=target,
                epoch_version=epoch_version, timeout=self._timeout,
            )  # fmt: skip
        return preempt_silent(
            self._client, self._paths, lock_node=target, beat_version=version,
            epoch_version=epoch_version, timeout=self._timeout,
        )  # fmt: skip

    def _preempt(self, decision: Decision) -> bool:
        """Verify the silence at ZooKeeper's leader, then delete; True when deleted."""
        target, version = decision.target, decision.version
        assert target is not None and version is not None
        # The sync and the reads go out together (ZooKeeper answers them in order), and,
        # when the window's end could be seen coming, before it (``leader.preempt_reads``).
        now = self._clock()
        reads = self._reads_ahead.take(target, version, now) or self._send_reads(
            target, version, now
        )
        beat_read, epoch_read = reads.beat, reads.epoch
        storms_read, epochs_read = reads.storms, reads.epochs
        reads.synced.get(timeout=self._deadline())
        current_version, announced = self._read_beat(target, watch=False, sent=beat_read)
        now = self._clock()
        with self._guard:
            self._machine.saw(target, current_version, now, announced)
            again = self._machine.decide(now)
        if again.short:
            # The evidence again, from ZooKeeper and the link, just before the delete.
            dead = self._dead(target, self._address_of(target), fresh=True)
            with self._guard:
                self._machine.peer_dead(target, dead)
                again = self._machine.decide(self._clock())
        if again.verdict is not Verdict.SILENT or again.version != version:
            log.info("%s: %s beat again (or we lost touch): not preempted", self._id, target)
            return True  # not an error: decide afresh at once
        epoch_read.wait(self._deadline())
        current, epoch_version = leader_epoch_of(epoch_read)
        outcome: PreemptOutcome | None = None
        holder = current is not None and current.lock_node == target
        if holder and current is not None and storms_read is not None and epochs_read is not None:
            # the term's holder: take office in the same write
            outcome = self._into_office(
                target, version, current, epoch_version, storms_read, epochs_read
            )
        in_office = outcome is PreemptOutcome.DELETED
        if outcome is None or outcome is PreemptOutcome.OFFICE_REFUSED:
            outcome = self._preempt_only(target, version, epoch_version)
        if outcome is PreemptOutcome.NODE_UNKNOWN:
            self._accuse_our_server(target)
        if outcome is not PreemptOutcome.DELETED:
            log.info("%s: preempting silent %s refused: %s", self._id, target, outcome.value)
            return False
        leading = current is not None and current.lock_node == target
        who = f"leader {current.holder} (epoch {current.epoch})" if leading and current else target
        seen = "no beat node" if version == ABSENT else f"beat version {version} unchanged"
        heard = ", heard dead (link closed and refused, or a new process at its address)"
        evidence = f"{who} silent: {seen} for the window{heard if again.short else ''}"
        took = ", and took office in the same multi-op" if in_office else ""
        log.warning("%s: preempted %s%s", self._id, evidence, took)
        if self._on_preempt is not None:
            self._on_preempt(evidence)
        return True
