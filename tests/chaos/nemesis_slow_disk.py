"""The nemesis's slow ZooKeeper disk (issue 41): ``zk-slow-disk@D`` faults and their figures.

Selected by name only (:func:`fault_kind` adds one to ``nemesis.FAULTS`` on first use),
so the soak, which runs every fault of that matrix, never runs one unasked. Every fsync of
every ZooKeeper server is delayed by D seconds for ``slow_disk.STALL_S``; what a trial
measured is read with :func:`slow_disk_figures`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from tests.chaos import slow_disk
from tests.chaos.harness import ROOT, LeaderView
from tests.chaos.history import Fault
from tests.chaos.kernel_ensemble import LeadershipPolls
from tests.chaos.nemesis import FAULTS, FaultKind, Inject, Nemesis
from tests.chaos.probes import BenchSupervisor, assigned_at
from tests.waiting import wait_until

#: What each slow-disk trial measured, by its fault's ``id`` (read with ``slow_disk_figures``).
_SLOW_DISK_FIGURES: dict[int, tuple[Fault, dict[str, Any]]] = {}
#: Seconds of polls kept after the cluster is healthy again.
SLOW_DISK_TAIL_S = 2.0


def slow_disk_figures(fault: Fault) -> dict[str, Any] | None:
    """The figures a slow-disk trial recorded for ``fault`` (None for other faults)."""
    found = _SLOW_DISK_FIGURES.get(id(fault))
    return found[1] if found is not None and found[0] is fault else None


def _slow_disk(delay: float) -> Inject:
    def run(n: Nemesis, f: Fault, leader: LeaderView) -> None:
        """Every fsync of every ZooKeeper server delayed by ``delay`` for ``STALL_S``
        (``tests.chaos.slow_disk``; needs ``force_sync``). The replicas are polled every
        50 ms from just before the stall to ``SLOW_DISK_TAIL_S`` after the cluster is
        healthy again, and a supervisor without workers offers slots, so the submits made
        during the stall can be seen scheduled. A write that takes less than the delay
        during the stall fails the trial: the stall did not work."""
        cluster, zk = n.cluster, n.cluster.zk
        admin = cluster.admin()
        timer = slow_disk.probe_client(f"{zk.connect_string}{cluster.chroot}")
        figures: dict[str, Any] = {"delay_s": delay, "stall_s": slow_disk.STALL_S}
        _SLOW_DISK_FIGURES[id(f)] = (f, figures)
        f.target = f"every fsync of zk nodes {list(range(zk.size))} +{delay:g} s"
        supervisor = BenchSupervisor(
            f"{zk.connect_string}{cluster.chroot}", ROOT, cluster.workdir, sid=f"sup-{f.trial}"
        )
        polls = LeadershipPolls([node.replica.address for node in cluster.nodes])
        stall = slow_disk.FsyncStall(zk.pids(), delay, cluster.workdir / "strace")
        logs = slow_disk.LogMark([zk.log_path(i) for i in range(zk.size)])
        try:
            supervisor.start(admin)
            polls.start()
            n.hold(0.5)  # a lead-in: the last claim before the stall
            try:
                stall.start()
                n.mark(f)
                took = slow_disk.timed_write(timer)
                figures["write_at_start_s"] = round(took, 3)
                slow_disk.check_stalled(took, delay, "at the stall's start")
                n.hold(max(0.0, f.start + slow_disk.STALL_S - 2 * delay - n.history.now()))
                took = slow_disk.timed_write(timer)
                figures["write_at_end_s"] = round(took, 3)
                slow_disk.check_stalled(took, delay, "at the stall's end")
            finally:
                stall.stop()
                n.healed(f)
                figures["syncs_delayed"] = stall.delayed()
            warned = logs.fsync_warnings()
            figures["zk_fsync_warnings"] = {"count": len(warned), "max_ms": max(warned, default=0)}
            figures["write_after_s"] = round(slow_disk.timed_write(timer), 3)
            with contextlib.suppress(AssertionError):  # the trial's own wait judges recovery
                cluster.wait_healthy(60)
            n.hold(SLOW_DISK_TAIL_S)
            polls.stop()
            t0 = n.history.t0
            figures["polls"] = slow_disk.stall_figures(
                polls.rounds(), t0 + f.start, t0 + f.healed, t0 + n.history.now(), delay
            )
            figures["submits_in_stall"] = _stall_submits(n, f, admin)
            figures["failed_in_stall"] = [
                f"{c.kind} at {c.start - f.start:+.1f} s: {c.code} {c.detail[:160]}"
                for c in n.history.snapshot()
                if c.outcome != "ok" and f.start <= c.start <= f.healed
            ][:10]
        finally:
            polls.stop()
            supervisor.stop()
            slow_disk.close_client(timer)

    return run


def _stall_submits(n: Nemesis, f: Fault, admin: KazooClient) -> dict[str, Any]:
    """The workload's submits started during the stall: how many, acknowledged, and
    scheduled (their assignment has slots), waited for up to a minute. The workload kills
    every other topology it submitted: one killed before it was placed is never placed,
    so ``unscheduled_live`` (acknowledged, not killed, no slots) is the figure to watch."""

    def started() -> list[Any]:
        calls = n.history.snapshot()
        return [c for c in calls if c.kind == "submit" and f.start <= c.start <= f.healed]

    with contextlib.suppress(AssertionError):  # one still on its way gets 30 s to answer
        wait_until(lambda: any(c.outcome == "ok" for c in started()), timeout=30,
                   interval=0.2, message="a submit of the stall acknowledged")  # fmt: skip
    ok = [c for c in started() if c.outcome == "ok"]

    def assigned() -> dict[str, float | None]:
        return {c.name: assigned_at(admin, ROOT, c.topology_id) for c in ok}

    def killed(topology_id: str) -> bool:
        try:
            data = admin.get(f"{ROOT}/storms/{topology_id}")[0]
        except NoNodeError:
            return True
        return bool(records.StormBase.FromString(data).status == records.KILLED)

    def placed_or_killed() -> bool:
        at = assigned()
        return all(at[c.name] is not None or killed(c.topology_id) for c in ok)

    with contextlib.suppress(AssertionError):
        wait_until(placed_or_killed, timeout=60, interval=0.5,
                   message="the stall's submits scheduled")  # fmt: skip
    at = assigned()
    wall = n.history.wall0
    unplaced = [c for c in ok if at[c.name] is None]
    return {
        "started": len(started()),
        "acknowledged": len(ok),
        "acknowledged_during_stall": sum(1 for c in ok if c.end <= f.healed),
        "scheduled": sum(1 for v in at.values() if v is not None),
        "unscheduled_killed": sum(1 for c in unplaced if killed(c.topology_id)),
        "unscheduled_live": sum(1 for c in unplaced if not killed(c.topology_id)),
        "scheduled_after_s": max(
            (round(v - wall - f.start, 2) for v in at.values() if v is not None), default=None
        ),
    }


#: Rows of the slow disk beside any ``zk-slow-disk@D`` (:func:`fault_kind` makes them).
SLOW_DISK_ROWS = ("zk-slow-disk@0.45", "zk-slow-disk@0.9", "zk-slow-disk@2")


def fault_kind(name: str) -> FaultKind | None:
    """The fault named ``name``: one of ``FAULTS``, or a slow-disk row ``zk-slow-disk@D``,
    added to ``FAULTS`` on first use (so the soak, which runs every fault in ``FAULTS``,
    never runs it unasked: it needs ZooKeeper with ``force_sync``)."""
    if name in FAULTS:
        return FAULTS[name]
    spec = slow_disk.parse(name)
    if spec is None or spec.then is not None:
        return None
    # The target: a slow ZooKeeper moves no leader.
    kind = FAULTS[name] = FaultKind(name, _slow_disk(spec.delay), "same-leader", needs_root=True)
    return kind
