"""The scheduler on real ZooKeeper: supervisors as processes, assignments that follow them,
the duty's writes fenced in the term (the pure placement rules: tests/test_scheduler.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from cluster.api import records
from cluster.paths import worker_name
from cluster.reads import read_storms_versioned
from fencing import (
    CancelReason,
    FencedWriter,
    LeadershipToken,
    ensure_folders,
)
from fencing.lease import Lease
from fencing.office import take_office
from nimbus.duties.planning import (
    rebalance_done,
)
from nimbus.duties.scheduler import SchedulerDuty
from pipeline.supervisor import NO_RUNTIME
from tests.cluster import REPO
from tests.test_scheduler import DIGEST, PATHS, ROOT, sup, where
from tests.waiting import wait_until

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
