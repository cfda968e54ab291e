"""The leader's scheduler: which supervisor slots run each topology's workers.

Two layers. ``plan`` and the staleness helpers are pure (``nimbus.duties.planning``).
``SchedulerDuty`` is the leader-only thread that reads ZooKeeper, calls ``plan`` and writes
only the assignments that changed, fenced and compare-and-set. Placement is sticky: a
worker stays where it is while its supervisor is registered and its heartbeat is fresh,
so a failover or a new supervisor moves nothing. A removal commits only with what it was
decided on proved at the quorum, in its own multi-op (``_evidence``): reads come from one
ZooKeeper server, which may lack a record its quorum has (ZOOKEEPER-4837).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from cluster.api import records
from cluster.paths import Paths, parse_worker_name
from cluster.reads import read_storms_versioned
from cluster.server_move import current_server
from fencing import FencedWriter, WriteConflictError, run_duty
from fencing.ops import Check, Delete, Op
from nimbus.duties.failing import count_failing
from nimbus.duties.failure_log import FailureLog
from nimbus.duties.planning import (
    SCHEDULED,
    Demand,
    SchedulerError,
    Slot,
    describe,
    disproved,
    kill_due,
    live_supervisors,
    plan,
    proof_of_absence,
    respread_due,
    same_slots,
    stale_slots,
)
from nimbus.duties.sweeper import catch_up, tree_deletes

log = logging.getLogger(__name__)

# -- the leader's duty ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Stored:
    """An assignment as read, with the version to compare-and-set against."""

    record: records.Assignment | None  # None: damaged, overwrite it
    version: int


class SchedulerDuty:
    """Leader-only: keeps ``/assignments`` in line with ``/storms`` and live supervisors.

    Runs until its writer's token is cancelled. Each pass reads ``/storms``,
    ``/supervisors``, ``/assignments`` and ``/workerbeats``, plans, and writes only
    what changed. ``clock`` is the wall clock in seconds: heartbeats carry wall-clock
    times written on other hosts, so it must be comparable with theirs.
    """

    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        writer: FencedWriter,
        *,
        interval: float,
        heartbeat_timeout: float,
        clock: Callable[[], float] = time.time,
        storms: Callable[[], dict[str, tuple[records.StormBase, int]]] | None = None,
        subscribe_storms: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
        on_failing: Callable[[dict[str, int]], None] | None = None,
    ) -> None:
        # ``storms`` (record, version) is the daemon's watch-fed cache, on a session of its
        # own: it may lag this session, so every assignment written from it checks, in the
        # same multi-op, that its topology's record is still the version it was decided
        # on. Tests read ZooKeeper directly.
        self._storms = storms or (lambda: read_storms_versioned(self._client, self._paths))
        # With the daemon's cache, its change listener replaces a watch on /storms: a new
        # watch lists every topology (10,000 names) right when a new leader takes office.
        self._subscribe_storms = subscribe_storms
        # Told each pass, from the heartbeats the pass read: topologies failing, by reason
        # (``nimbus.duties.failing``), for the metrics.
        self._on_failing = on_failing
        if interval <= 0:
            raise SchedulerError(f"schedule interval must be > 0 seconds, got {interval}")
        if heartbeat_timeout <= interval:
            raise SchedulerError(
                f"heartbeat timeout ({heartbeat_timeout}s) must exceed the schedule interval "
                f"({interval}s), or workers would be judged between two looks"
            )
        self._client = client
        self._paths = paths
        self._writer = writer
        self._interval = interval
        self._timeout_ms = int(heartbeat_timeout * 1000)
        self._clock = clock
        self._started_ms = self._now_ms()
        self._wake = threading.Event()
        self._shortfall: dict[str, int] = {}
        self._failures = FailureLog(client, paths, writer, wall_ms=self._now_ms)
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)

    @property
    def shortfall(self) -> dict[str, int]:
        """Workers per topology the last pass could not place (no free slot)."""
        return dict(self._shortfall)

    def start(self) -> None:
        token = self._writer.token
        folders = [self._paths.supervisors]
        if self._subscribe_storms is None:
            folders.append(self._paths.storms)
        else:
            unsubscribe = self._subscribe_storms(self._wake.set)
            token.on_cancel(lambda _reason: unsubscribe())
        for folder in folders:
            ChildrenWatch(self._client, folder, self._on_children)
        self._thread.start()

    def poke(self) -> None:
        """Run a pass now (a topology was submitted, a supervisor came or went)."""
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def run_once(self) -> list[str]:
        """One pass; returns the changes made, in words."""
        now = self._now_ms()
        view = self._storms()
        storms = {tid: base for tid, (base, _) in view.items()}
        versions = {tid: version for tid, (_, version) in view.items()}
        stored = self._read_assignments()
        current = {tid: s.record for tid, s in stored.items() if s.record is not None}
        beats, beat_versions = self._read_heartbeats()
        if self._on_failing is not None:
            self._on_failing(count_failing(storms, {t: b.values() for t, b in beats.items()}))
        supervisors = live_supervisors(
            self._read_supervisors(),
            now_ms=now,
            timeout_ms=self._timeout_ms,
            not_before_ms=self._started_ms,
        )
        if not supervisors and not stored and not beats:
            return []  # nowhere to place anything and nothing placed: skip the planning
        scheduled = {tid: base for tid, base in storms.items() if base.status in SCHEDULED}
        dead = stale_slots(
            {tid: a for tid, a in current.items() if tid in scheduled},
            beats,
            now_ms=now,
            timeout_ms=self._timeout_ms,
            not_before_ms=self._started_ms,
        )
        # Removals first: a topology's slots are given away only once the removal of its
        # assignment committed, with its evidence proved at the quorum (``_evidence``).
        # Our server may lack a record its quorum has, or the view miss one (a read lost
        # to a disconnect): then the removal is refused, and its slots stay reserved.
        removed: list[str] = []
        kept: set[str] = set()
        for tid in sorted(stored):
            base = storms.get(tid)
            if base is not None and not kill_due(base, now):
                continue
            evidence = self._evidence(tid, base, versions.get(tid))
            if evidence is None:
                log.info("keeping the assignment of %s: its record is there, not yet read", tid)
            elif self._remove(tid, stored[tid].version, evidence):
                why = "killed" if base is not None else "no longer in /storms"
                removed.append(f"{tid}: assignment removed ({why})")
                continue
            kept.add(tid)
        reserved = [
            Slot(s.supervisor_id, s.slot)
            for tid, a in current.items()
            if tid in kept
            or (tid in storms and tid not in scheduled and not kill_due(storms[tid], now))
            for s in a.slots
        ]
        afresh = {
            tid for tid, base in scheduled.items() if respread_due(base, current.get(tid), now)
        }
        result = plan(
            {
                tid: Demand(max(base.num_workers, 1), None if tid in afresh else current.get(tid))
                for tid, base in scheduled.items()
            },
            supervisors,
            dead,
            reserved=reserved,
        )
        self._note_shortfall(result.shortfall)
        changes: list[str] = []
        for tid in sorted(scheduled):
            slots = result.assignments[tid]
            change = self._write(
                tid, scheduled[tid], stored.get(tid), slots, now, tid in afresh, versions.get(tid)
            )
            if change:
                changes.append(change)
        changes.extend(removed)
        in_use: dict[str, set[Slot]] = {}  # before and after this pass
        for tid, a in current.items():
            in_use.setdefault(tid, set()).update(Slot(s.supervisor_id, s.slot) for s in a.slots)
        for tid, placed in result.assignments.items():
            in_use.setdefault(tid, set()).update(Slot(s.supervisor_id, s.slot) for s in placed)
        changes.extend(self._clean_heartbeats(view, set(stored), in_use, beats, beat_versions, now))
        changes.extend(
            self._failures.record_new(
                (tid, str(slot), beat)
                for tid, slots in beats.items()
                if tid in storms
                for slot, beat in slots.items()
            )
        )
        return changes

    # -- writes ---------------------------------------------------------------------------

    def _write(
        self,
        tid: str,
        base: records.StormBase,
        stored: _Stored | None,
        slots: list[records.SlotAssignment],
        now_ms: int,
        afresh: bool,
        storm_version: int | None = None,
    ) -> str | None:
        """Write when placement or code changed; an afresh placement is always written,
        so its newer ``assigned_ms`` shows the rebalance was acted on. With
        ``storm_version``, only while the topology's record is still at it."""
        old = stored.record if stored is not None else None
        same = old is not None and same_slots(old.slots, slots) and old.digest == base.digest
        if same and not afresh:
            return None
        if stored is None and not slots:
            return None  # nothing to say yet: no supervisor has room
        record = records.Assignment(
            topology_id=tid, slots=slots, digest=base.digest, assigned_ms=now_ms
        )
        path = self._paths.assignment(tid)
        unchanged = (
            [Check(self._paths.storm(tid), storm_version)] if storm_version is not None else []
        )
        try:
            if stored is None:
                self._writer.create_record(path, record, unchanged=unchanged)
            else:
                self._writer.set_record(path, record, version=stored.version, unchanged=unchanged)
        except WriteConflictError as e:
            log.info("assignment of %s changed under us, next pass: %s", tid, e)
            return None
        before = describe(old.slots) if old is not None else "none"
        return f"{tid}: {before} -> {describe(slots)}" + (" (rebalanced)" if afresh else "")

    def _evidence(
        self, tid: str, base: records.StormBase | None, version: int | None
    ) -> list[Op] | None:
        """What removing ``tid``'s assignment or heartbeats rests on, as ops for the same
        multi-op; None when nothing may be removed (its record is there, the view missed
        it). Killed in the view: its record still at the version the view read (a kill
        our server showed may have been a ZooKeeper ghost). Absent from the view: read now;
        absent, proved absent at the quorum (``/storms`` is made at start and never
        deleted, so the create in the proof has its parent); damaged (every reader skips
        it), still damaged at the version read."""
        path = self._paths.storm(tid)
        if base is not None:
            return [Check(path, -1 if version is None else version)]
        try:
            data, stat = self._client.get(path)
        except NoNodeError:
            return proof_of_absence(path)
        try:
            records.StormBase.FromString(data)
        except DecodeError:
            return [Check(path, int(stat.version))]
        return None

    def _remove(self, tid: str, version: int, evidence: list[Op]) -> bool:
        """The assignment and the heartbeats of ``tid``, in one multi-op with ``evidence``;
        False (logged, our server synced on the path) when the quorum refused it."""
        ops = [
            *evidence,
            Delete(self._paths.assignment(tid), version),
            *tree_deletes(self._client, self._paths.workerbeats_of(tid)),
        ]
        return self._commit(tid, ops, "the assignment")

    def _commit(self, tid: str, ops: list[Op], what: str) -> bool:
        try:
            self._writer.batch(ops)
        except WriteConflictError as e:
            if disproved(e, self._paths.storm(tid)):
                log.warning(
                    "ZooKeeper server %s showed %s gone and the quorum has it: %s of %s "
                    "stays (the server is behind or diverged)",
                    current_server(self._client),
                    e.path,
                    what,
                    tid,
                )
            else:
                log.info("could not remove %s of %s yet: %s", what, tid, e)
            catch_up(self._client, e.path)
            return False
        return True

    def _clean_heartbeats(
        self,
        view: Mapping[str, tuple[records.StormBase, int]],
        had_assignment: set[str],
        in_use: Mapping[str, set[Slot]],
        beats: Mapping[str, Mapping[Slot, records.WorkerHeartbeat]],
        beat_versions: Mapping[str, int],
        now_ms: int,
    ) -> list[str]:
        """Remove heartbeats nobody will update: of gone topologies, of unassigned slots.

        A heartbeat of a slot no longer assigned is removed by its supervisor; the leader
        removes it only once it is stale too (its supervisor is dead), so the two never
        fight over a node a live supervisor is still about to delete. ``in_use`` holds
        the slots of each topology before and after this pass: a write that lost a race
        must not cost a live worker its heartbeat. Each removal rests on what it was
        decided on, at the quorum: a gone topology's evidence (``_evidence``), a stale
        heartbeat's version (a worker that beat since keeps it).
        """
        changes: list[str] = []
        for tid in sorted(beats):
            base, version = view.get(tid, (None, None))
            if base is None or base.status == records.KILLED:
                # with an assignment, ``_remove`` took its heartbeats along with it
                evidence = None if tid in had_assignment else self._evidence(tid, base, version)
                if (
                    evidence is not None
                    and (deletes := tree_deletes(self._client, self._paths.workerbeats_of(tid)))
                    and self._commit(tid, [*evidence, *deletes], "the heartbeats")
                ):
                    changes.append(f"{tid}: heartbeats removed (topology gone)")
                continue
            for key, beat in sorted(beats[tid].items()):
                if key in in_use.get(tid, ()) or now_ms - beat.time_ms <= self._timeout_ms:
                    continue
                path = self._paths.workerbeat(tid, str(key))
                if self._commit(tid, [Delete(path, beat_versions[path])], f"heartbeat {key}"):
                    changes.append(f"{tid}: stale heartbeat of unassigned {key} removed")
        return changes

    # -- reads ----------------------------------------------------------------------------

    def _read_assignments(self) -> dict[str, _Stored]:
        result: dict[str, _Stored] = {}
        for tid in self._children(self._paths.assignments):
            try:
                data, stat = self._client.get(self._paths.assignment(tid))
            except NoNodeError:
                continue
            try:
                record: records.Assignment | None = records.Assignment.FromString(data)
            except DecodeError:
                log.warning("damaged assignment of %s will be rewritten", tid)
                record = None
            result[tid] = _Stored(record, int(stat.version))
        return result

    def _read_supervisors(self) -> dict[str, records.SupervisorInfo]:
        result: dict[str, records.SupervisorInfo] = {}
        for sid in self._children(self._paths.supervisors):
            try:
                data, _ = self._client.get(self._paths.supervisor(sid))
                info = records.SupervisorInfo.FromString(data)
            except NoNodeError:
                continue
            except DecodeError:
                log.warning("ignoring supervisor %s: damaged record", sid)
                continue
            result[sid] = info
        return result

    def _read_heartbeats(
        self,
    ) -> tuple[dict[str, dict[Slot, records.WorkerHeartbeat]], dict[str, int]]:
        """The heartbeats by topology and slot, and each node's version by path."""
        result: dict[str, dict[Slot, records.WorkerHeartbeat]] = {}
        versions: dict[str, int] = {}
        for tid in self._children(self._paths.workerbeats):
            beats: dict[Slot, records.WorkerHeartbeat] = {}
            for name in self._children(self._paths.workerbeats_of(tid)):
                parsed = parse_worker_name(name)
                if parsed is None:
                    continue
                path = self._paths.workerbeat(tid, name)
                try:
                    data, stat = self._client.get(path)
                    beats[Slot(*parsed)] = records.WorkerHeartbeat.FromString(data)
                except NoNodeError:
                    continue
                except DecodeError:
                    log.warning("ignoring damaged heartbeat %s/%s", tid, name)
                    continue
                versions[path] = int(stat.version)
            result[tid] = beats
        return result, versions

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._client.get_children(path))
        except NoNodeError:
            return []

    # -- loop -----------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _note_shortfall(self, shortfall: dict[str, int]) -> None:
        if shortfall != self._shortfall:
            for tid, missing in sorted(shortfall.items()):
                log.warning("%s: %d worker(s) found no free slot", tid, missing)
        self._shortfall = shortfall

    def _on_children(self, children: list[str]) -> bool | None:
        if self._writer.token.cancelled:
            return False  # this term is over: stop watching
        self._wake.set()
        return None

    def _run(self) -> None:
        token = self._writer.token
        run_duty(
            "scheduler", token, self.run_once, interval=self._interval, log=log, wake=self._wake
        )
