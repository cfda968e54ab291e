"""The fault matrix made by the kernel and signals, and what a CLI user saw through it.

Each trial: wait for a healthy cluster and for the workload to be acknowledged, inject
one fault on the leader, hold it, undo it (restarting a killed replica), and wait until
the cluster is healthy and acknowledging again. Per trial the report gives:

- **failover**: from the fault to the take-office multi-op of the new leader (the ctime
  ZooKeeper gave ``/epochs/<n>``); none when the leader stayed;
- **resumed**: from the fault to the first fenced write of the leader in office after it
  (the ctime of the first ``/requests`` record of its epoch after the fault), read as the
  trial ends: the leader prunes old request records;
- **unavailability**: the longest stretch without an acknowledged CLI change, from the
  last one before the fault to the first one after the fault was over (undone, and the
  leader in office writing again), as the users saw it;
- **failed calls**: CLI calls that ended in an error (their default deadline, 30 s,
  outlasts every failover here).

``FAULTS`` is the matrix the soak and the tests run. Beside it, selectable by name
(:func:`known`) but in no test's matrix: ``EXTRA_FAULTS``, faults that must not depose a
healthy leader (issue 41), and the slow-disk rows ``zk-slow-disk@D[+FAULT]``
(``tests.chaos.slow_disk``; they need ZooKeeper with fsync on: :class:`SyncedKernelCluster`),
both in ``tests.chaos.kernel_faults_extra``. A trial's record and what happens around the
fault (the wait before, the recovery after) are in ``tests.chaos.kernel_trial``.
"""

from __future__ import annotations

import itertools
import signal
import time

from kazoo.exceptions import NoNodeError

from cluster.api import records
from devtools.netns import Cut
from tests.chaos import slow_disk
from tests.chaos.cli_workload import CliWorkload
from tests.chaos.kernel_cluster import ROOT, KernelCluster
from tests.chaos.kernel_faults_extra import EXTRA_FAULTS, run_slow_disk_trial
from tests.chaos.kernel_trial import (
    Inject,
    Trial,
    TrialInject,
    healthy_and_acknowledging,
    recover,
)


def _signal(signum: int) -> Inject:
    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.kill(leader, signum)

    return run


def _pause(factor: float) -> Inject:
    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.signal(leader, signal.SIGSTOP)
        try:
            time.sleep(factor * T)  # holding the fault is the fault
        finally:
            cluster.signal(leader, signal.SIGCONT)

    return run


def _cut(what: Cut, factor: float) -> Inject:
    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.cut(leader, what)
        try:
            time.sleep(factor * T)  # holding the fault is the fault
        finally:
            cluster.heal(leader)

    return run


def _pause_seconds(seconds: float) -> Inject:
    """A pause of fixed length, whatever T: shorter than the silence window, it must not
    move leadership."""

    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.signal(leader, signal.SIGSTOP)
        try:
            time.sleep(seconds)  # holding the fault is the fault
        finally:
            cluster.signal(leader, signal.SIGCONT)

    return run


def _zookeeper_pause(seconds: float) -> Inject:
    """SIGSTOP of the ZooKeeper server itself: every beat stalls, none is silence."""

    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.zk.pause(0)
        try:
            time.sleep(seconds)  # holding the fault is the fault
        finally:
            cluster.zk.resume(0)

    return run


def _false_positive(cluster: KernelCluster, leader: int, T: float) -> None:
    """The leader is alive, but its port answers the successor's probes with a TCP reset
    (as if nothing listened): the successor preempts a live leader, which must step down."""
    successor = cluster.successor()
    cluster.cut(leader, Cut.REFUSE_PEER, peer=successor)
    try:
        time.sleep(T / 2)  # holding the fault is the fault
    finally:
        cluster.heal(leader)


FAULTS: dict[str, Inject] = {
    "sigkill": _signal(signal.SIGKILL),
    "sigterm": _signal(signal.SIGTERM),
    "sigstop-2T": _pause(2.0),
    "sigstop-3T": _pause(3.0),
    "sigstop-1s": _pause_seconds(1.0),
    "zk-stop-1s": _zookeeper_pause(1.0),
    "zk-cut-both": _cut(Cut.ZOOKEEPER_BOTH, 3.0),
    "zk-cut-out": _cut(Cut.ZOOKEEPER_OUT, 3.0),
    "zk-cut-in": _cut(Cut.ZOOKEEPER_IN, 3.0),
    "isolated": _cut(Cut.ISOLATED, 3.0),
    "clients-cut": _cut(Cut.CLIENTS, 2.0),
    "blip": _cut(Cut.ISOLATED, 0.25),
    "false-positive": _false_positive,
}


def known(fault: str) -> bool:
    """Whether ``fault`` names a fault :func:`run_trial` can make."""
    if fault in FAULTS or fault in EXTRA_FAULTS:
        return True
    spec = slow_disk.parse(fault)
    return spec is not None and (spec.then is None or spec.then in FAULTS)


def _trial_inject(fault: str) -> TrialInject:
    if fault in EXTRA_FAULTS:
        return EXTRA_FAULTS[fault]
    plain = FAULTS[fault]
    return lambda cluster, leader, T, trial: plain(cluster, leader, T)


def run_trial(cluster: KernelCluster, workload: CliWorkload, fault: str) -> Trial:
    spec = slow_disk.parse(fault)
    if spec is not None:
        return run_slow_disk_trial(cluster, workload, spec, FAULTS)
    T = cluster.session_timeout
    leader, epoch = healthy_and_acknowledging(cluster, workload)
    trial = Trial(fault, leader, epoch, start=time.time())
    _trial_inject(fault)(cluster, leader, T, trial)
    trial.healed = time.time()
    recover(cluster, workload, trial, [leader])
    return trial


def measure(cluster: KernelCluster, workload: CliWorkload, trials: list[Trial]) -> None:
    """Fill in each trial's figures from the calls and ZooKeeper's own records."""
    calls = workload.snapshot()
    acks = sorted(c.end for c in calls if c.ok and c.op.mutating)
    starts = [t.start for t in trials]
    bounds = zip([float("-inf"), *starts[1:]], [*starts[1:], float("inf")], strict=True)
    for trial, (since, next_start) in zip(trials, bounds, strict=True):
        write = None if trial.resumed_s is None else trial.start + trial.resumed_s
        # The fault is over once undone and the leader in office writes again.
        over = trial.over = max(trial.healed, write or trial.healed)
        first = next((i for i, end in enumerate(acks) if end >= over), None)
        last = max((i for i, end in enumerate(acks) if end <= trial.start), default=None)
        if first is not None and last is not None:
            window = acks[last : first + 1]
            trial.unavailability_s = max(b - a for a, b in itertools.pairwise(window))
        # Each failed call is counted once: in the trial whose window it ended in.
        trial.failed = [c for c in calls if not c.ok and since <= c.end < next_start]


def quiet_gaps(workload: CliWorkload, trials: list[Trial]) -> list[float]:
    """Gaps between consecutive acknowledged changes outside every fault (from a trial's
    start to its ``over``): the workload's own cadence, to read the gaps under faults by."""
    acks = sorted(c.end for c in workload.snapshot() if c.ok and c.op.mutating)
    windows = [(t.start, t.over) for t in trials]
    return [
        b - a
        for a, b in itertools.pairwise(acks)
        if not any(a < end and b > start for start, end in windows)
    ]


def lost_or_duplicated(cluster: KernelCluster, workload: CliWorkload) -> list[str]:
    """Acknowledged changes missing from ZooKeeper, and names held by two records."""
    admin = cluster.admin()
    problems: list[str] = []
    by_name: dict[str, list[records.StormBase]] = {}
    admin.sync(ROOT)
    for tid in admin.get_children(f"{ROOT}/storms"):
        try:
            base = records.StormBase.FromString(admin.get(f"{ROOT}/storms/{tid}")[0])
        except NoNodeError:  # a killed topology swept since the listing
            continue
        by_name.setdefault(base.name, []).append(base)
    for name, bases in by_name.items():
        if len(bases) > 1:
            problems.append(f"{name}: {len(bases)} records")
    calls = workload.snapshot()
    killed = {c.name for c in calls if c.ok and c.op.name == "KILL"}
    for call in calls:
        if call.ok and call.op.name == "SUBMIT" and call.name not in killed:
            live = by_name.get(call.name, [])
            if not any(b.status != records.KILLED for b in live):
                problems.append(f"{call.name}: acknowledged submit not live")
    return problems
