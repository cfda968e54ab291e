"""The scheduler: pure placement rules, then supervisors as processes on real ZooKeeper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from cluster.api import records
from cluster.paths import Paths, parse_worker_name, worker_name
from cluster.reads import read_storms_versioned
from fencing import (
    CancelReason,
    FencedWriter,
    LeadershipToken,
    Membership,
    MembershipError,
    ensure_folders,
)
from fencing.lease import Lease
from fencing.office import take_office
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
from pipeline.supervisor import NO_RUNTIME
from tests.cluster import REPO
from tests.waiting import wait_until

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


# -- on ZooKeeper, supervisors as processes ------------------------------------------------------


class SupervisorProc:
    def __init__(
        self, zookeeper: str, sid: str, workdir: Path, *, session_timeout: float, slots: int | None
    ) -> None:
        self.sid = sid
        cmd = [
            sys.executable, "-m", "nimbus.cli.cmd_supervisor", "--zookeeper", zookeeper,
            "--root", ROOT, "--id", sid, "--host", "127.0.0.1",
            "--heartbeat-interval", "0.2", "--session-timeout", str(session_timeout),
            "--no-workers",
        ]  # fmt: skip
        if slots is not None:
            cmd += ["--slots", str(slots)]
        self.log_path = workdir / f"supervisor-{sid}.log"
        env = {**os.environ, "NIMBUS_SLOTS": "3"}  # the env fallback, used when --slots is absent
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env
            )

    def send(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def stop(self) -> int:
        """SIGTERM (after SIGCONT): a graceful exit closes the session, so no ephemeral lingers."""
        if self.proc.poll() is None:
            self.send(signal.SIGCONT)
            self.send(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


Spawn = Callable[..., SupervisorProc]


@pytest.fixture
def spawn(zk_hosts: str, tmp_path: Path) -> Iterator[Spawn]:
    started: list[SupervisorProc] = []

    def make(sid: str, *, session_timeout: float = 2.0, slots: int | None = 4) -> SupervisorProc:
        proc = SupervisorProc(zk_hosts, sid, tmp_path, session_timeout=session_timeout, slots=slots)
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


def lead(client: KazooClient, identifier: str) -> tuple[Lock, FencedWriter]:
    """Take the lock and office as a replica would (see test_fencing's ``_lead``)."""
    ensure_folders(client, PATHS.folders())
    lock = Lock(client, PATHS.leader_lock, identifier=identifier)
    assert lock.acquire(timeout=10)
    node = f"{lock.path}/{lock.node}"
    epoch = take_office(
        client, PATHS, lock_node=node, holder=identifier, now_ms=lambda: 0, timeout=5
    )
    return lock, FencedWriter(client, LeadershipToken(node, epoch), timeout=5)


def add_topology(writer: FencedWriter, tid: str, workers: int) -> None:
    base = records.StormBase(name=tid, status=records.ACTIVE, num_workers=workers, digest=DIGEST)
    writer.create_record(PATHS.storm(tid), base)


def read_assignment(client: KazooClient, tid: str) -> records.Assignment | None:
    stat = client.exists(PATHS.assignment(tid))
    if stat is None:
        return None
    return records.Assignment.FromString(client.get(PATHS.assignment(tid))[0])


def placements(client: KazooClient) -> dict[str, list[tuple[str, int]]]:
    return {
        tid: where(a.slots)
        for tid in client.get_children(PATHS.assignments)
        if (a := read_assignment(client, tid)) is not None
    }


def beat(client: KazooClient, tid: str, sid: str, slot: int) -> records.WorkerHeartbeat | None:
    path = PATHS.workerbeat(tid, worker_name(sid, slot))
    if client.exists(path) is None:
        return None
    return records.WorkerHeartbeat.FromString(client.get(path)[0])


def all_beating(client: KazooClient, since_ms: int = 0) -> bool:
    """Every assigned slot has a heartbeat newer than ``since_ms`` saying nothing runs yet."""
    for tid, slots in placements(client).items():
        for sid, slot in slots:
            hb = beat(client, tid, sid, slot)
            if hb is None or hb.time_ms <= since_ms or hb.status != NO_RUNTIME:
                return False
    return True


def registered(client: KazooClient, *sids: str) -> bool:
    return all(client.exists(PATHS.supervisor(s)) is not None for s in sids)


def lead_registered(
    client: KazooClient, topologies: dict[str, int], *sids: str
) -> tuple[Lock, FencedWriter]:
    """Lead as ``leader:1`` once supervisors ``sids`` registered, and add ``topologies``
    (id: workers)."""
    lock, writer = lead(client, "leader:1")
    wait_until(lambda: registered(client, *sids), 20, message="registration")
    for tid, workers in topologies.items():
        add_topology(writer, tid, workers)
    return lock, writer


def snapshot(client: KazooClient) -> dict[str, tuple[bytes, int, int]]:
    result = {}
    for tid in client.get_children(PATHS.assignments):
        data, stat = client.get(PATHS.assignment(tid))
        result[tid] = (data, stat.version, stat.mzxid)
    return result


def spread_evenly(client: KazooClient, want: dict[str, int], sids: set[str]) -> bool:
    now = placements(client)
    if {t: len(s) for t, s in now.items()} != want:
        return False
    per = Counter(s for slots in now.values() for s, _ in slots)
    return set(per) == sids and max(per.values()) - min(per.values()) <= 1


def test_assignments_spread_and_follow_a_killed_supervisor(
    spawn: Spawn, zk_client: KazooClient
) -> None:
    spawn("sup-a")
    killed = spawn("sup-b")
    _, writer = lead_registered(zk_client, {"wc-1": 2, "wc-2": 2}, "sup-a", "sup-b")
    duty = SchedulerDuty(zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0)
    duty.start()
    try:
        wait_until(
            lambda: spread_evenly(zk_client, {"wc-1": 2, "wc-2": 2}, {"sup-a", "sup-b"}),
            10,
            message="an even spread",
        )
        for tid, slots in placements(zk_client).items():
            assert {s for s, _ in slots} == {"sup-a", "sup-b"}, f"{tid} spans both hosts"
            record = read_assignment(zk_client, tid)
            assert record is not None
            assert (record.epoch, record.digest) == (writer.token.epoch, DIGEST)
        wait_until(lambda: all_beating(zk_client), 10, message="a heartbeat per assigned slot")
        info = records.SupervisorInfo.FromString(zk_client.get(PATHS.supervisor("sup-a"))[0])
        assert (info.slots_total, info.slots_used, info.host) == (4, 2, "127.0.0.1")

        killed.send(signal.SIGKILL)  # its ephemeral node lives until its 2 s session expires
        wait_until(
            lambda: spread_evenly(zk_client, {"wc-1": 2, "wc-2": 2}, {"sup-a"}),
            15,
            message="every worker moved to sup-a",
        )
        assert sorted(s for slots in placements(zk_client).values() for s in slots) == [
            ("sup-a", 0), ("sup-a", 1), ("sup-a", 2), ("sup-a", 3)
        ]  # fmt: skip
        wait_until(lambda: all_beating(zk_client), 10, message="sup-a beating for all four")

        def killed_topology_gone() -> bool:
            return (
                read_assignment(zk_client, "wc-2") is None
                and zk_client.exists(PATHS.workerbeats_of("wc-2")) is None
            )

        writer.update_record(
            PATHS.storm("wc-2"),
            records.StormBase.FromString,
            lambda b: setattr(b, "status", records.KILLED),
        )
        wait_until(killed_topology_gone, 10, message="the killed topology's assignment removed")
        wait_until(
            lambda: (
                records.SupervisorInfo.FromString(
                    zk_client.get(PATHS.supervisor("sup-a"))[0]
                ).slots_used
                == 2
            ),
            10,
            message="sup-a reporting two slots used",
        )
    finally:
        writer.token.cancel(CancelReason.SHUTDOWN)
        duty.join(5)


def test_a_paused_supervisor_is_judged_by_its_heartbeats_before_its_session_ends(
    spawn: Spawn, zk_client: KazooClient
) -> None:
    spawn("sup-a", session_timeout=8.0)
    paused = spawn("sup-b", session_timeout=8.0)
    _, writer = lead_registered(zk_client, {"wc": 2}, "sup-a", "sup-b")
    # 3 s: well past a loaded machine's stall of the live sup-a, well inside the 8 s session.
    duty = SchedulerDuty(zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=3.0)

    def after_a_pass(check: Callable[[], bool]) -> Callable[[], bool]:
        return lambda: (duty.run_once(), check())[1]

    wait_until(
        after_a_pass(lambda: placements(zk_client) == {"wc": [("sup-a", 0), ("sup-b", 0)]}),
        10,
        interval=0.1,
    )
    wait_until(lambda: all_beating(zk_client), 10, message="both workers beating")
    paused.send(signal.SIGSTOP)
    stopped = time.monotonic()
    wait_until(
        after_a_pass(lambda: placements(zk_client) == {"wc": [("sup-a", 0), ("sup-a", 1)]}),
        15,
        interval=0.1,
        message="the paused supervisor's worker moved",
    )
    assert time.monotonic() - stopped < 8.0
    assert registered(zk_client, "sup-b"), "moved by heartbeat, while its session still lives"
    moved = snapshot(zk_client)

    resumed_ms = int(time.time() * 1000)
    paused.send(signal.SIGCONT)

    def fresh_again() -> bool:
        info = records.SupervisorInfo.FromString(zk_client.get(PATHS.supervisor("sup-b"))[0])
        return info.heartbeat_ms > resumed_ms and info.slots_used == 0

    wait_until(fresh_again, 10, message="sup-b reporting again, holding nothing")
    wait_until(
        lambda: beat(zk_client, "wc", "sup-b", 0) is None, 10, message="its old heartbeat gone"
    )
    assert duty.run_once() == [], "a supervisor coming back moves nothing"
    assert snapshot(zk_client) == moved


def test_a_new_term_keeps_every_assignment_byte_for_byte(
    spawn: Spawn, zk_client: KazooClient
) -> None:
    spawn("sup-a")
    spawn("sup-b")
    lock, writer = lead_registered(zk_client, {"wc-1": 2, "wc-2": 1}, "sup-a", "sup-b")
    duty = SchedulerDuty(zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=5.0)
    duty.start()
    wait_until(lambda: spread_evenly(zk_client, {"wc-1": 2, "wc-2": 1}, {"sup-a", "sup-b"}), 10)
    wait_until(lambda: all_beating(zk_client), 10, message="all workers beating")
    before = snapshot(zk_client)
    writer.token.cancel(CancelReason.SHUTDOWN)
    duty.join(5)
    lock.release()

    _, writer2 = lead(zk_client, "leader:2")
    assert writer2.token.epoch > writer.token.epoch
    successor = SchedulerDuty(zk_client, PATHS, writer2, interval=0.2, heartbeat_timeout=5.0)
    assert successor.run_once() == []
    assert snapshot(zk_client) == before, "not rewritten, not even with the new epoch"
    for tid in before:
        record = read_assignment(zk_client, tid)
        assert record is not None and record.epoch == writer.token.epoch

    spawn("sup-c")
    wait_until(lambda: registered(zk_client, "sup-c"), 20, message="sup-c registered")
    assert successor.run_once() == [], "a new supervisor moves nothing"
    assert snapshot(zk_client) == before
    writer2.token.cancel(CancelReason.SHUTDOWN)


def test_a_supervisor_takes_flags_from_the_environment_and_leaves_cleanly_on_sigterm(
    spawn: Spawn, zk_client: KazooClient
) -> None:
    proc = spawn("sup-env", slots=None)  # NIMBUS_SLOTS=3 in its environment
    _, writer = lead(zk_client, "leader:1")
    wait_until(lambda: registered(zk_client, "sup-env"), 20, message="registration")
    info = records.SupervisorInfo.FromString(zk_client.get(PATHS.supervisor("sup-env"))[0])
    assert info.slots_total == 3
    add_topology(writer, "wc", 5)
    duty = SchedulerDuty(zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=5.0)
    assert duty.run_once() == ["wc: none -> [sup-env-0, sup-env-1, sup-env-2]"]
    assert duty.shortfall == {"wc": 2}
    wait_until(lambda: all_beating(zk_client), 10, message="three heartbeats")
    assert proc.stop() == 0
    assert not registered(zk_client, "sup-env")
    assert zk_client.get_children(PATHS.workerbeats_of("wc")) == []
    writer.token.cancel(CancelReason.SHUTDOWN)


def test_membership_writes_only_its_own_persistent_nodes(zk_client: KazooClient) -> None:
    mine = Membership(zk_client, "sup-a", timeout=5)
    mine.put("/beats/t/sup-a-0", b"1")
    mine.put("/beats/t/sup-a-0", b"2")
    assert zk_client.get("/beats/t/sup-a-0")[0] == b"2"
    with pytest.raises(MembershipError):
        mine.put("/beats/t/sup-a-b-0", b"x")
    assert mine.remove("/beats/t/sup-a-0") is True
    assert mine.remove("/beats/t/sup-a-0") is False


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


def test_the_duty_spreads_a_rebalanced_topology_and_removes_a_deleted_one(
    zk_client: KazooClient,
) -> None:
    _, writer = lead(zk_client, "leader:1")
    zk_client.create(PATHS.supervisor("a"), sup("a").SerializeToString(), ephemeral=True)
    duty = SchedulerDuty(zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0)
    add_topology(writer, "wc", 2)
    add_topology(writer, "gone", 1)
    assert duty.run_once() == ["gone: none -> [a-0]", "wc: none -> [a-1, a-2]"]
    zk_client.create(PATHS.supervisor("b"), sup("b").SerializeToString(), ephemeral=True)
    assert duty.run_once() == [], "a new supervisor alone moves nothing"

    def rebalance(base: records.StormBase) -> None:
        base.status_before_rebalance = base.status
        base.status = records.REBALANCING
        base.rebalance_until_ms = int(time.time() * 1000)

    writer.update_record(PATHS.storm("wc"), records.StormBase.FromString, rebalance)
    writer.delete(PATHS.storm("gone"))
    assert duty.run_once() == [
        "wc: [a-1, a-2] -> [a-0, b-0] (rebalanced)",
        "gone: assignment removed (no longer in /storms)",
    ]
    assert duty.run_once() == []
    record = read_assignment(zk_client, "wc")
    base = records.StormBase.FromString(zk_client.get(PATHS.storm("wc"))[0])
    assert record is not None and rebalance_done(base, record)


def test_a_topology_missing_from_a_stale_view_keeps_its_assignment_and_slots(
    zk_client: KazooClient,
) -> None:
    """A record whose read was lost to a disconnect is absent from the leader's view, not
    from ZooKeeper: its workers must neither be removed nor have their slots given away."""
    _, writer = lead(zk_client, "leader:1")
    zk_client.create(PATHS.supervisor("a"), sup("a", 3).SerializeToString(), ephemeral=True)
    hidden: set[str] = set()

    def view() -> dict[str, tuple[records.StormBase, int]]:
        return {t: v for t, v in read_storms_versioned(zk_client, PATHS).items() if t not in hidden}

    duty = SchedulerDuty(
        zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0, storms=view
    )
    add_topology(writer, "wc", 2)
    assert duty.run_once() == ["wc: none -> [a-0, a-1]"]
    hidden.add("wc")  # the view lost it; ZooKeeper still has it
    add_topology(writer, "new", 2)
    assert duty.run_once() == ["new: none -> [a-2]"], "only the free slot may be used"
    assert placements(zk_client)["wc"] == [("a", 0), ("a", 1)]
    hidden.clear()
    writer.delete(PATHS.storm("wc"))  # really removed now: its slots are free at once
    assert duty.run_once() == [
        "new: [a-2] -> [a-2, a-0]",
        "wc: assignment removed (no longer in /storms)",
    ]


def test_a_lapsed_lease_pauses_the_scheduler_and_the_next_renewal_resumes_it(
    zk_client: KazooClient,
) -> None:
    """The lease lapses while the token lives (a pause shorter than the session, a slow
    link): the duty must wait for the next renewal, not quit for the rest of the term."""
    now = [100.0]
    lease = Lease(1.0, clock=lambda: now[0])
    lease.renew(now[0])
    asked: list[bool] = []

    def lease_valid() -> bool:
        asked.append(lease.valid())
        return asked[-1]

    _, plain = lead(zk_client, "leader:1")
    writer = FencedWriter(zk_client, plain.token, timeout=5, lease_valid=lease_valid)
    zk_client.create(PATHS.supervisor("a"), sup("a").SerializeToString(), ephemeral=True)
    add_topology(plain, "wc", 1)
    now[0] += 5.0  # lapsed: the token is alive
    duty = SchedulerDuty(zk_client, PATHS, writer, interval=0.05, heartbeat_timeout=30.0)
    duty.start()
    try:
        wait_until(lambda: asked.count(False) >= 2, timeout=20, message="passes meeting the lapse")
        assert read_assignment(zk_client, "wc") is None, "nothing written under a lapsed lease"
        lease.renew(now[0])  # the next heartbeat
        wait_until(lambda: read_assignment(zk_client, "wc"), timeout=20, message="an assignment")
    finally:
        writer.token.cancel(CancelReason.SHUTDOWN)
        duty.join(5)


def test_a_view_that_lags_zookeeper_never_assigns_a_topology_changed_since(
    zk_client: KazooClient,
) -> None:
    """The daemon's view of /storms reads on a session of its own and may lag the leader's:
    a topology killed (or changed) since the view read it must not get an assignment from
    that view. The write checks the record's version in its own multi-op."""
    _, writer = lead(zk_client, "leader:1")
    zk_client.create(PATHS.supervisor("a"), sup("a", 3).SerializeToString(), ephemeral=True)
    add_topology(writer, "wc", 2)
    data, stat = zk_client.get(PATHS.storm("wc"))
    frozen = {"wc": (records.StormBase.FromString(data), int(stat.version))}
    killed = records.StormBase.FromString(data)
    killed.status = records.KILLED
    writer.set_record(PATHS.storm("wc"), killed, version=stat.version)  # unseen by the view
    duty = SchedulerDuty(
        zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0,
        storms=lambda: dict(frozen),
    )  # fmt: skip
    assert duty.run_once() == []
    assert placements(zk_client) == {}, "a killed topology was given workers"
    frozen["wc"] = (killed, int(zk_client.exists(PATHS.storm("wc")).version))
    add_topology(writer, "new", 1)
    data, stat = zk_client.get(PATHS.storm("new"))
    frozen["new"] = (records.StormBase.FromString(data), int(stat.version))
    assert duty.run_once() == ["new: none -> [a-0]"], "a current view assigns as before"
