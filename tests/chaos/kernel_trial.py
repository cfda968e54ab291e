"""A kernel-fault trial's record (:class:`Trial`), and what comes before and after its fault.

Before: a healthy cluster and an acknowledging workload. After: the victims restarted, the
cluster healthy and acknowledging again, the probe submits read, and the wall times
ZooKeeper's own records give (the take-office of a term, its first fenced write). Also the
shapes of a fault (``Inject``, ``TrialInject``). The faults themselves are in
``tests.chaos.kernel_faults`` (the matrix) and ``tests.chaos.kernel_faults_extra`` (issue
41's rows).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths
from tests.chaos.cli_workload import CliCall, CliWorkload
from tests.chaos.kernel_cluster import ROOT, KernelCluster
from tests.chaos.probes import ProbeSubmit, scheduled
from tests.waiting import wait_until

Inject = Callable[[KernelCluster, int, float], None]  # (cluster, leader index, T)


@dataclass
class Trial:
    fault: str
    leader: int
    epoch_before: int
    start: float = 0.0
    healed: float = 0.0
    epoch_after: int = 0
    failover_s: float | None = None
    resumed_s: float | None = None
    unavailability_s: float | None = None
    over: float = 0.0  # wall time the fault was over: undone, and the leader writing again
    failed: list[CliCall] = field(default_factory=list)
    #: What the fault itself recorded (wall times, victims, probes' outcomes); JSON-ready.
    details: dict[str, Any] = field(default_factory=dict)
    #: Set when the fault could not be made as it says (e.g. the fsync stall slowed nothing).
    error: str = ""
    probes: list[ProbeSubmit] = field(default_factory=list, repr=False)

    @property
    def failovers(self) -> int:
        """New terms from the fault to the end of the trial (take-office adds one each)."""
        return max(0, self.epoch_after - self.epoch_before)


#: A fault that records what it did in the trial: (cluster, leader index, T, trial).
TrialInject = Callable[[KernelCluster, int, float, Trial], None]


def acks_after(workload: CliWorkload, t: float) -> int:
    return sum(1 for c in workload.snapshot() if c.ok and c.op.mutating and c.end > t)


def healthy_and_acknowledging(cluster: KernelCluster, workload: CliWorkload) -> tuple[int, int]:
    leader, epoch = cluster.wait_healthy(120)
    settled = time.time()
    wait_until(lambda: acks_after(workload, settled) >= 2, timeout=120, message="acks before")
    return leader, epoch


def recover(
    cluster: KernelCluster, workload: CliWorkload, trial: Trial, victims: list[int]
) -> None:
    """Restart the victims that died, wait healthy and acknowledging; the figures."""
    for i in dict.fromkeys(victims):
        if not cluster.replicas[i].alive():
            cluster.spawn(i)
    trial.epoch_after = cluster.wait_healthy(120)[1]
    wait_until(lambda: acks_after(workload, trial.healed) >= 1, timeout=120, message="acks after")
    if trial.epoch_after != trial.epoch_before:
        took = took_office_at(cluster, trial.epoch_after)
        trial.failover_s = None if took is None else round(took - trial.start, 3)
    write = first_write_of(cluster, trial.epoch_after, trial.start)
    trial.resumed_s = None if write is None else round(write - trial.start, 3)
    _finish_probes(cluster, trial)


def _finish_probes(cluster: KernelCluster, trial: Trial, timeout: float = 300.0) -> None:
    """Each probe submit's outcome, against the fault's window, and whether its topology
    was scheduled (read only where a supervisor offers slots)."""
    admin = cluster.admin()
    with_slots = bool(admin.get_children(Paths(ROOT).supervisors))
    end = trial.details.get("stall_end") or trial.healed
    found = []
    for probe in trial.probes:
        result = probe.join(timeout)
        answer: dict[str, Any] = {
            "name": result.name,
            "ok": result.ok,
            "started_s": round(result.start - trial.start, 2),
            "answered_s": round(result.end - trial.start, 2) if result.end else None,
            "answered_during_fault": result.ok and result.end <= end,
        }
        if not result.ok:
            answer["error"] = result.stderr[-300:]
        if result.ok and with_slots:
            answer.update(scheduled(admin, ROOT, result.name, timeout=60, since=trial.start))
        found.append(answer)
    if found:
        trial.details["probe_submits"] = found


def took_office_at(cluster: KernelCluster, epoch: int) -> float | None:
    """Wall time ZooKeeper created ``/epochs/<epoch>``: the take-office multi-op."""
    stat = cluster.admin().exists(f"{ROOT}/epochs/{epoch}")
    return None if stat is None else stat.ctime / 1000.0


def first_write_of(cluster: KernelCluster, epoch: int, after: float) -> float | None:
    """Wall time of the first ``/requests`` record of ``epoch`` created after ``after``."""
    admin = cluster.admin()
    folder = f"{ROOT}/requests"
    first: float | None = None
    for name in admin.get_children(folder):
        try:
            data, stat = admin.get(f"{folder}/{name}")
        except NoNodeError:  # pruned by the leader's history bound since the listing
            continue
        created = stat.ctime / 1000.0
        if created <= after or records.RequestOutcome.FromString(data).epoch != epoch:
            continue
        first = created if first is None else min(first, created)
    return first
