"""The scheduler's pure logic: where each topology's workers go, and when.

No I/O and time passed in, so the placement rules are tested directly; ``SchedulerDuty``
(``nimbus.duties.scheduler``) reads ZooKeeper, calls ``plan`` and writes what changed.
Placement is sticky: a worker stays where it is while its supervisor is registered and
its heartbeat is fresh, so a failover or a new supervisor moves nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from cluster.api import records
from cluster.errors import NimbusError
from cluster.paths import worker_name
from fencing.errors import ConflictReason, WriteConflictError
from fencing.ops import Create, Delete, Op

#: Topologies that get workers. INACTIVE keeps its workers (spouts paused, as in Storm);
#: CODE_MISSING keeps whatever assignment it has but is never (re)placed.
SCHEDULED = frozenset({records.ACTIVE, records.INACTIVE, records.REBALANCING})


class SchedulerError(NimbusError):
    """The scheduler was configured with settings it cannot work with."""


class Slot(NamedTuple):
    """One worker slot of one supervisor."""

    supervisor_id: str
    slot: int

    def __str__(self) -> str:
        return worker_name(self.supervisor_id, self.slot)


@dataclass(frozen=True)
class Demand:
    """What a topology asks for and where its workers are now."""

    num_workers: int
    current: records.Assignment | None = None


@dataclass(frozen=True)
class Plan:
    """Slots per topology and how many workers did not fit.

    Kept slots keep their order and a replacement takes the place of the slot it
    replaces, so a worker's index in ``Assignment.slots`` moves only when one is missing.
    """

    assignments: dict[str, list[records.SlotAssignment]]
    shortfall: dict[str, int] = field(default_factory=dict)


# -- pure logic ---------------------------------------------------------------------------


def plan(
    topologies: Mapping[str, Demand],
    supervisors: Mapping[str, records.SupervisorInfo],
    dead_slots: Iterable[Slot] = (),
    *,
    reserved: Iterable[Slot] = (),
) -> Plan:
    """Place ``num_workers`` workers per topology on the given (live) supervisors.

    Kept: a current slot on a listed supervisor, within its ``slots_total``, not in
    ``dead_slots`` and not taken twice. Everything else is placed one worker per
    topology in turn (round-robin, fairest when capacity is short) on the supervisor
    with the fewest used slots, then the fewest workers of that topology, then by id.
    Supervisors with a dead slot get no new workers in this plan: a hung supervisor
    shows as dead slots before its own record goes stale. ``reserved`` slots belong to
    assignments the scheduler leaves alone. Workers that find no slot are counted in
    ``shortfall``; a topology never gets more than it asked for.
    """
    dead = {Slot(*s) for s in dead_slots}
    capacity = {sid: info.slots_total for sid, info in supervisors.items() if info.slots_total > 0}
    taken: set[Slot] = {Slot(*s) for s in reserved}
    used: Counter[str] = Counter(s.supervisor_id for s in taken)
    rows: dict[str, list[records.SlotAssignment | None]] = {}
    for tid in sorted(topologies):
        demand = topologies[tid]
        row: list[records.SlotAssignment | None] = []
        for current in demand.current.slots if demand.current is not None else ():
            key = Slot(current.supervisor_id, current.slot)
            limit = capacity.get(key.supervisor_id, 0)
            if 0 <= key.slot < limit and key not in dead and key not in taken:
                taken.add(key)
                used[key.supervisor_id] += 1
                row.append(_slot(key, supervisors[key.supervisor_id], current.port))
            else:
                row.append(None)
        _shrink(row, max(demand.num_workers, 0), taken, used)
        rows[tid] = row
    suspect = {s.supervisor_id for s in dead}
    pending = [tid for tid in sorted(rows) if None in rows[tid]]
    while pending:
        for tid in list(pending):
            row = rows[tid]
            here = Counter(s.supervisor_id for s in row if s is not None)
            free = _free_slot(capacity, taken, dead, suspect, used, here)
            if free is None:
                pending = []  # no room anywhere: every topology keeps what it has
                break
            taken.add(free)
            used[free.supervisor_id] += 1
            row[row.index(None)] = _slot(free, supervisors[free.supervisor_id], 0)
            if None not in row:
                pending.remove(tid)
    return Plan(
        assignments={tid: [s for s in row if s is not None] for tid, row in rows.items()},
        shortfall={tid: row.count(None) for tid, row in rows.items() if None in row},
    )


def _slot(key: Slot, info: records.SupervisorInfo, port: int) -> records.SlotAssignment:
    return records.SlotAssignment(
        slot=key.slot, supervisor_id=key.supervisor_id, host=info.host, port=port
    )


def _shrink(
    row: list[records.SlotAssignment | None],
    want: int,
    taken: set[Slot],
    used: Counter[str],
) -> None:
    """Cut ``row`` to ``want`` entries (holes first, then from the busiest supervisor)."""
    while len(row) > want:
        if None in row:
            del row[len(row) - 1 - row[::-1].index(None)]
            continue
        placed = [s for s in row if s is not None]  # no holes are left at this point
        here = Counter(s.supervisor_id for s in placed)
        loads = [(used[s.supervisor_id], here[s.supervisor_id], i) for i, s in enumerate(placed)]
        victim = placed.pop(max(loads)[2])
        row[:] = placed
        taken.discard(Slot(victim.supervisor_id, victim.slot))
        used[victim.supervisor_id] -= 1
    row.extend([None] * (want - len(row)))


def _free_slot(
    capacity: Mapping[str, int],
    taken: set[Slot],
    dead: set[Slot],
    suspect: set[str],
    used: Counter[str],
    here: Counter[str],
) -> Slot | None:
    best: tuple[int, int, str] | None = None
    choice: Slot | None = None
    for sid, total in capacity.items():
        if sid in suspect or used[sid] >= total:
            continue
        free = next(
            (n for n in range(total) if Slot(sid, n) not in taken and Slot(sid, n) not in dead),
            None,
        )
        if free is None:
            continue
        rank = (used[sid], here[sid], sid)
        if best is None or rank < best:
            best, choice = rank, Slot(sid, free)
    return choice


def live_supervisors(
    supervisors: Mapping[str, records.SupervisorInfo],
    *,
    now_ms: int,
    timeout_ms: int,
    not_before_ms: int = 0,
) -> dict[str, records.SupervisorInfo]:
    """Registered supervisors whose own heartbeat is fresh.

    A supervisor's ephemeral node outlives a hung process by a whole session; its
    ``heartbeat_ms`` does not. 0 (never reported) counts as fresh. ``not_before_ms`` is
    when this leader started judging: nothing counts as silent for longer than that.
    """
    return {
        sid: info
        for sid, info in supervisors.items()
        if not info.heartbeat_ms or now_ms - max(info.heartbeat_ms, not_before_ms) <= timeout_ms
    }


def stale_slots(
    assignments: Mapping[str, records.Assignment],
    heartbeats: Mapping[str, Mapping[Slot, records.WorkerHeartbeat]],
    *,
    now_ms: int,
    timeout_ms: int,
    not_before_ms: int = 0,
) -> set[Slot]:
    """Assigned slots whose worker has been silent for longer than ``timeout_ms``.

    A slot's silence starts at the latest of its last heartbeat, its assignment's
    ``assigned_ms`` (a worker gets a whole timeout to report after any change of its
    topology's assignment; an older heartbeat from an earlier placement does not count)
    and ``not_before_ms`` (a new leader gives everyone one timeout before judging, so its
    first passes never churn even if heartbeats lagged while no leader was watching).
    """
    stale: set[Slot] = set()
    for tid, assignment in assignments.items():
        beats = heartbeats.get(tid, {})
        for assigned in assignment.slots:
            key = Slot(assigned.supervisor_id, assigned.slot)
            beat = beats.get(key)
            last = max(beat.time_ms if beat is not None else 0, assignment.assigned_ms)
            if now_ms - max(last, not_before_ms) > timeout_ms:
                stale.add(key)
    return stale


def respread_due(base: records.StormBase, current: records.Assignment | None, now_ms: int) -> bool:
    """A finished rebalance wait not yet acted on: place the topology afresh, evenly.

    Placement is otherwise sticky, so spreading onto new supervisors is what a rebalance
    is for. Due once the wait is over and until an assignment newer than it is written;
    the rebalance should end (status back) only after that (see ``rebalance_done``).
    """
    return (
        base.status == records.REBALANCING
        and 0 < base.rebalance_until_ms <= now_ms
        and current is not None
        and current.assigned_ms < base.rebalance_until_ms
    )


def rebalance_done(base: records.StormBase, current: records.Assignment | None) -> bool:
    """True once the scheduler has placed a rebalanced topology afresh (or had nothing to move)."""
    return current is None or current.assigned_ms >= base.rebalance_until_ms


def same_slots(a: Sequence[records.SlotAssignment], b: Sequence[records.SlotAssignment]) -> bool:
    def key(s: records.SlotAssignment) -> tuple[str, int, str, int]:
        return (s.supervisor_id, s.slot, s.host, s.port)

    return [key(s) for s in a] == [key(s) for s in b]


def describe(slots: Sequence[records.SlotAssignment]) -> str:
    return "[" + ", ".join(worker_name(s.supervisor_id, s.slot) for s in slots) + "]"


def kill_due(base: records.StormBase, now_ms: int) -> bool:
    """A killed topology's removal is due: its ``--wait`` (Storm's drain) is over."""
    return base.status == records.KILLED and now_ms >= base.kill_time_ms + base.kill_wait_s * 1000


# -- proofs at the quorum -------------------------------------------------------------------


def proof_of_absence(path: str) -> list[Op]:
    """Ops that commit only where ZooKeeper's quorum has no node at ``path``: create it and
    delete it again, in the multi-op of the write that acts on its absence (as taking
    office proves the last term's lock node gone, ``fencing.office``).

    One server's "no such node" may be wrong (a server behind its quorum, or one that
    diverged from it, ZOOKEEPER-4837); the create fails (NodeExists) unless the quorum
    lacks the node too, and then the whole multi-op is refused. ``path``'s parent must
    exist at the quorum: where it does not, the create fails as well (NoNode) and the
    write is refused, the safe side. Every path proved here is a record in a folder the
    leader creates at start and never deletes (``/storms/<id>``, ``/names/<name>``).
    """
    return [Create(path), Delete(path)]


def disproved(error: WriteConflictError, path: str) -> bool:
    """Whether ``error`` is ``proof_of_absence(path)`` refuted: the quorum has ``path``,
    and nothing was written. (A missing parent is a conflict like any other.)"""
    return error.path == path and error.reason is ConflictReason.EXISTS
