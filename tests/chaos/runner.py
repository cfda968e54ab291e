"""One chaos run: a fresh cluster, the workload, ``trials`` of one fault, then the checks."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.exceptions import KazooException, NoNodeError

from cluster.paths import Paths
from devtools.zkserver import ZooKeeperCluster
from tests.chaos.checkers import check_all
from tests.chaos.harness import MIN_REPLICAS, ROOT, ChaosCluster, LeadershipSampler, verified_copies
from tests.chaos.history import Call, Fault, History
from tests.chaos.nemesis import FAULTS, Nemesis
from tests.chaos.state import ZkState, read_state
from tests.chaos.txnlog import read_txns, s1_txnlog
from tests.chaos.workload import Workload
from tests.waiting import wait_until


@dataclass
class RunResult:
    fault: str
    session_timeout: float
    history: History
    faults: list[Fault]
    violations: dict[str, list[str]] = field(default_factory=dict)
    logs: str = ""
    cluster: ChaosCluster | None = None

    @property
    def clean(self) -> bool:
        return not any(self.violations.values())


def run_fault(
    zk: ZooKeeperCluster,
    workdir: Path,
    fault: str,
    trials: int,
    *,
    session_timeout: float = 2.0,
    rate: float = 8.0,
) -> RunResult:
    """``trials`` of one fault on one fresh cluster (the soak's unit)."""
    return run_plan(zk, workdir, [fault] * trials, session_timeout=session_timeout, rate=rate)


def run_plan(
    zk: ZooKeeperCluster,
    workdir: Path,
    plan: list[str],
    *,
    session_timeout: float = 2.0,
    rate: float = 8.0,
    keep: bool = False,
) -> RunResult:
    """One fresh cluster, the workload, each fault of ``plan`` once in order, the checks.

    With ``keep`` the replicas are stopped (SIGKILL) but ZooKeeper's state and the code
    dirs stay for the caller, through ``RunResult.cluster``.
    """
    kinds = [FAULTS[name] for name in plan]
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = ChaosCluster(
        zk,
        workdir,
        f"/chaos-{uuid.uuid4().hex[:8]}",
        session_timeout=session_timeout,
        tmpfs_code_dirs=any(k.small_code_disks for k in kinds),
    )
    history = History()
    try:
        cluster.start()
        sampler = LeadershipSampler(cluster, history.t0).start()
        workload = Workload(
            cluster.seeds, history, workdir, rate=rate, observe_ack=_holders_at_ack(cluster)
        ).start()
        nemesis = Nemesis(cluster, history)
        try:
            for trial, kind in enumerate(kinds):
                nemesis.trial(kind, trial)
        finally:
            workload.stop()
            sampler.stop()
            history.leadership = sampler.samples
        cluster.heal_all()
        cluster.wait_healthy(60)
        _failovers(cluster, history)
        name = plan[0] if len(set(plan)) == 1 else "+".join(dict.fromkeys(plan))
        result = RunResult(name, session_timeout, history, list(history.faults), cluster=cluster)
        result.violations = final_check(cluster, history)
        if not result.clean or not all(f.recovered for f in result.faults):
            result.logs = "\n".join(
                f"--- replica {n.index}\n{n.replica.log_tail(40)}" for n in cluster.nodes
            )
        return result
    finally:
        if keep:
            cluster.stop_replicas()
        else:
            cluster.stop()


def _failovers(cluster: ChaosCluster, history: History) -> None:
    """Each fault that made a new term: from the fault to that term's take-office write,
    as ZooKeeper timed it (the ctime of ``/epochs/<n>``; same machine, same wall clock)."""
    admin = cluster.admin()
    paths = Paths(ROOT)
    for fault in history.faults:
        if fault.epoch_after <= fault.epoch_before:
            continue
        try:
            _, stat = admin.get(paths.epoch(fault.epoch_before + 1))
        except NoNodeError:
            continue
        fault.failover_s = round(history.at_wall(stat.ctime / 1000.0) - fault.start, 3)


def _holders_at_ack(cluster: ChaosCluster) -> Callable[[Call], None]:
    """Read, right after a submit's acknowledgement, who holds its code: ZooKeeper's
    holder nodes, and the replicas whose store has a verified copy (checker S3)."""
    code_dirs = [n.code_dir for n in cluster.nodes]
    admin_guard = threading.Lock()

    def observe(call: Call) -> None:
        folder = Paths(ROOT).code_holders(call.topology_id)
        try:
            with admin_guard:
                admin = cluster.admin()
                admin.sync(ROOT)  # the server asked may lag the one the leader wrote to
                call.holders_at_ack = sorted(admin.get_children(folder))
        except NoNodeError:
            call.holders_at_ack = []
        except KazooException:
            call.holders_at_ack = None  # unreadable is not "no holders"; copies still judge
        call.copies_at_ack = verified_copies(code_dirs, call.digest)

    return observe


def final_check(
    cluster: ChaosCluster, history: History, settle: float = 30.0
) -> dict[str, list[str]]:
    """Read the final state and run S1-S4; code may still be syncing, so S3 gets ``settle``."""
    state: list[ZkState] = []
    code_dirs = [n.code_dir for n in cluster.nodes]

    def copies(digest: str) -> list[int]:
        return verified_copies(code_dirs, digest)

    def code_settled() -> bool:
        state[:] = [read_state(cluster.admin(), ROOT)]
        found = check_all(state[0], history, copies, MIN_REPLICAS)
        return not found["S3"]

    with contextlib.suppress(AssertionError):  # S3 then reports what is still missing
        wait_until(code_settled, timeout=settle, interval=0.5, message="code on enough replicas")
    found = check_all(state[0], history, copies, MIN_REPLICAS)
    if isinstance(cluster.zk, ZooKeeperCluster):  # not for an external ensemble
        found["S1"] += s1_txnlog(read_txns(cluster.zk), f"{cluster.chroot}{ROOT}")
    return found
