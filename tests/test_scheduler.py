"""The scheduler's pure placement rules (on real ZooKeeper: tests/test_scheduler_duty.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.api import records
from cluster.paths import Paths, parse_worker_name, worker_name
from fencing import (
    FencedWriter,
    LeadershipToken,
    Membership,
)
from nimbus.duties.planning import (
    Demand,
    SchedulerError,
    Slot,
    live_supervisors,
    plan,
    rebalance_done,
    respread_due,
    stale_slots,
)
from nimbus.duties.scheduler import SchedulerDuty

ROOT = "/storm"
PATHS = Paths(ROOT)
DIGEST = "ab" * 32


# -- pure placement ---------------------------------------------------------------------------


def sup(sid: str, slots: int = 4, heartbeat_ms: int = 0) -> records.SupervisorInfo:
    return records.SupervisorInfo(
        supervisor_id=sid, host=f"{sid}.example", slots_total=slots, heartbeat_ms=heartbeat_ms
    )


def sups(**slots: int) -> dict[str, records.SupervisorInfo]:
    return {sid: sup(sid, n) for sid, n in slots.items()}


def assignment(*slots: tuple[str, int], assigned_ms: int = 0) -> records.Assignment:
    return records.Assignment(
        slots=[
            records.SlotAssignment(supervisor_id=s, slot=n, host=f"{s}.example") for s, n in slots
        ],
        assigned_ms=assigned_ms,
    )


def where(slots: Sequence[records.SlotAssignment]) -> list[tuple[str, int]]:
    return [(s.supervisor_id, s.slot) for s in slots]


def used(assignments: dict[str, list[records.SlotAssignment]]) -> Counter[str]:
    return Counter(s.supervisor_id for slots in assignments.values() for s in slots)


def test_workers_spread_evenly_over_supervisors() -> None:
    result = plan({"t1": Demand(2), "t2": Demand(2)}, sups(a=4, b=4))
    assert used(result.assignments) == {"a": 2, "b": 2}
    for slots in result.assignments.values():
        assert {s.supervisor_id for s in slots} == {"a", "b"}, "a topology spans both hosts"
        assert all(s.host == f"{s.supervisor_id}.example" for s in slots)
    assert result.shortfall == {}


def test_a_plan_of_the_current_state_changes_nothing_even_with_a_new_supervisor() -> None:
    first = plan({"t1": Demand(3), "t2": Demand(2)}, sups(a=4, b=4))
    current = {tid: Demand(n, records.Assignment(slots=first.assignments[tid])) for tid, n in
               (("t1", 3), ("t2", 2))}  # fmt: skip
    again = plan(current, sups(a=4, b=4, c=4))
    assert {t: where(s) for t, s in again.assignments.items()} == {
        t: where(s) for t, s in first.assignments.items()
    }


def test_workers_of_a_vanished_supervisor_move_and_the_others_stay() -> None:
    current = {
        "t1": Demand(2, assignment(("a", 0), ("b", 0))),
        "t2": Demand(2, assignment(("b", 1), ("a", 1))),
    }
    result = plan(current, sups(a=4, c=4))
    assert where(result.assignments["t1"]) == [("a", 0), ("c", 0)], "replacement takes its place"
    assert where(result.assignments["t2"]) == [("c", 1), ("a", 1)]


def test_dead_slots_move_and_their_supervisor_gets_no_new_worker() -> None:
    current = {"t1": Demand(2, assignment(("a", 0), ("b", 0)))}
    result = plan(current, sups(a=4, b=4), {Slot("a", 0)})
    # a has three free slots and b is busier, but a hung supervisor shows first as dead slots
    assert where(result.assignments["t1"]) == [("b", 1), ("b", 0)]


def test_capacity_is_never_exceeded_and_the_shortfall_is_shared_round_robin() -> None:
    result = plan({"t1": Demand(3), "t2": Demand(3)}, sups(a=1, b=2))
    assert used(result.assignments) == {"a": 1, "b": 2}
    assert sorted(len(s) for s in result.assignments.values()) == [1, 2]
    assert sum(result.shortfall.values()) == 3
    assert plan({"t1": Demand(1)}, {}).shortfall == {"t1": 1}


def test_slots_beyond_a_shrunk_supervisor_and_double_booked_slots_move() -> None:
    current = {
        "t1": Demand(1, assignment(("a", 3))),  # a now has only 2 slots
        "t2": Demand(1, assignment(("b", 0))),
        "t3": Demand(1, assignment(("b", 0))),  # the same slot twice: the first keeps it
    }
    result = plan(current, sups(a=2, b=2))
    assert where(result.assignments["t2"]) == [("b", 0)]
    assert where(result.assignments["t1"]) == [("a", 0)]
    assert where(result.assignments["t3"]) == [("a", 1)]


def test_growing_and_shrinking_a_topology_touches_only_the_difference() -> None:
    grown = plan({"t1": Demand(3, assignment(("a", 0)))}, sups(a=4, b=4))
    assert where(grown.assignments["t1"])[0] == ("a", 0)
    assert used(grown.assignments) == {"a": 2, "b": 1}
    shrunk = plan({"t1": Demand(2, assignment(("a", 0), ("a", 1), ("b", 0)))}, sups(a=4, b=4))
    assert sorted(where(shrunk.assignments["t1"])) == [("a", 0), ("b", 0)], "busiest host gives"


def test_reserved_slots_are_left_alone() -> None:
    result = plan({"t1": Demand(2)}, sups(a=1, b=2), reserved=[Slot("a", 0)])
    assert where(result.assignments["t1"]) == [("b", 0), ("b", 1)]


SUPERVISORS = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]), st.integers(min_value=0, max_value=4), max_size=4
)
DEMANDS = st.dictionaries(
    st.sampled_from(["t1", "t2", "t3", "t4"]), st.integers(min_value=1, max_value=5), max_size=4
)


@settings(max_examples=300, deadline=None)
@given(capacity=SUPERVISORS, demands=DEMANDS, gone=st.sampled_from(["a", "b", "c", "d"]))
def test_plans_are_valid_even_and_sticky(
    capacity: dict[str, int], demands: dict[str, int], gone: str
) -> None:
    supervisors = sups(**capacity)
    result = plan({t: Demand(n) for t, n in demands.items()}, supervisors)
    placed = [(s.supervisor_id, s.slot) for slots in result.assignments.values() for s in slots]
    assert len(placed) == len(set(placed)), "a slot is used once"
    assert all(0 <= n < capacity[s] for s, n in placed)
    counts = Counter(s for s, _ in placed)
    for tid, n in demands.items():
        assert len(result.assignments[tid]) + result.shortfall.get(tid, 0) == n
    assert len(placed) == min(sum(demands.values()), sum(capacity.values()))
    for b, total in capacity.items():
        if counts[b] < total:  # b has room, so nobody may be more than one worker busier
            assert all(counts[a] <= counts[b] + 1 for a in capacity), counts
    current = {
        t: Demand(n, records.Assignment(slots=result.assignments[t])) for t, n in demands.items()
    }
    again = plan(current, supervisors)
    assert {t: where(s) for t, s in again.assignments.items()} == {
        t: where(s) for t, s in result.assignments.items()
    }, "planning the plan changes nothing"
    survivors = {s: i for s, i in supervisors.items() if s != gone}
    after = plan(current, survivors)
    for tid, slots in result.assignments.items():
        kept = [x for x in where(slots) if x[0] != gone]
        assert [x for x in where(after.assignments[tid]) if x in kept] == kept


def test_a_slot_is_stale_only_after_a_whole_timeout_of_silence() -> None:
    a = assignment(("a", 0), ("b", 0), ("c", 0), assigned_ms=10_000)
    beats = {
        "t": {
            Slot("a", 0): records.WorkerHeartbeat(time_ms=19_000),
            Slot("b", 0): records.WorkerHeartbeat(time_ms=12_000),
        }
    }

    def stale(now: int, not_before: int = 0) -> set[Slot]:
        return stale_slots({"t": a}, beats, now_ms=now, timeout_ms=5_000, not_before_ms=not_before)

    assert stale(14_000) == set(), "no heartbeat yet, but assigned only 4 s ago"
    assert stale(16_000) == {Slot("c", 0)}, "never reported in the 5 s since it was assigned"
    assert stale(17_500) == {Slot("b", 0), Slot("c", 0)}
    assert stale(24_500) == {Slot("a", 0), Slot("b", 0), Slot("c", 0)}
    assert stale(17_500, not_before=15_000) == set(), "a new leader gives everyone a timeout"
    moved = assignment(("a", 0), ("b", 0), ("c", 0), assigned_ms=18_000)
    assert stale_slots({"t": moved}, beats, now_ms=22_000, timeout_ms=5_000) == set(), (
        "a heartbeat from before the latest assignment does not count against it"
    )


def test_a_supervisor_whose_own_heartbeat_is_old_is_not_live() -> None:
    registered = {"a": sup("a", heartbeat_ms=9_000), "b": sup("b", heartbeat_ms=3_000)}
    registered["old"] = sup("old")  # never reported a time: judged by its session alone
    live = live_supervisors(registered, now_ms=10_000, timeout_ms=5_000)
    assert sorted(live) == ["a", "old"]
    grace = live_supervisors(registered, now_ms=10_000, timeout_ms=5_000, not_before_ms=8_000)
    assert sorted(grace) == ["a", "b", "old"]


def test_heartbeat_names_and_their_owners_are_unambiguous() -> None:
    assert worker_name("sup-a", 3) == "sup-a-3"
    assert parse_worker_name("sup-a-3") == ("sup-a", 3)
    assert parse_worker_name("sup-a-x") is None
    assert parse_worker_name("7") is None
    mine = Membership(None, "sup-a", timeout=1)  # no I/O here
    assert mine.owns_prefixed("/storm/workerbeats/t/sup-a-0")
    assert not mine.owns_prefixed("/storm/workerbeats/t/sup-a-b-0"), "that is sup-a-b's"
    assert not mine.owns_prefixed("/storm/workerbeats/t/sup-a")
    assert not mine.owns_prefixed("/storm/workerbeats/t/sup-b-0")


def test_the_duty_refuses_a_timeout_it_cannot_judge() -> None:
    token = LeadershipToken("/storm/leader-lock/x", 1)
    writer = FencedWriter(None, token, timeout=1)  # no I/O here
    with pytest.raises(SchedulerError, match="must exceed"):
        SchedulerDuty(None, PATHS, writer, interval=1.0, heartbeat_timeout=1.0)


def test_a_finished_rebalance_is_placed_afresh_once() -> None:
    base = records.StormBase(status=records.REBALANCING, rebalance_until_ms=10_000)
    old = assignment(("a", 0), ("a", 1), assigned_ms=5_000)
    assert not respread_due(base, old, 9_999), "still waiting"
    assert respread_due(base, old, 10_000)
    assert not rebalance_done(base, old)
    fresh = plan({"t": Demand(2, None)}, sups(a=4, b=4))
    assert {s.supervisor_id for s in fresh.assignments["t"]} == {"a", "b"}
    new = records.Assignment(slots=fresh.assignments["t"], assigned_ms=10_200)
    assert not respread_due(base, new, 10_400), "acted on once"
    assert rebalance_done(base, new)
    active = records.StormBase(status=records.ACTIVE, rebalance_until_ms=0)
    assert not respread_due(active, old, 10_000)
