"""The chaos suite's short runs (the soak, test_soak.py, runs for hours): a real 3-replica
cluster on a 3-node ensemble, faults one at a time.

Each test runs a plan of faults on one fresh cluster under the client workload, then
asserts the safety checkers S1-S4 over the history and final state, and that the
service recovered after every fault within a generous deadline. Timing figures are
printed for the curious and measured properly by the soak (``bench/chaos.py``). Each
plan takes half a minute or more of faults and recovery: ``chaos_plan`` marks them
``slow`` (``tests.tiers``), out of ``./run-tests --fast``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from cluster.api import records
from devtools.netns import available
from devtools.zkserver import ZooKeeperCluster
from tests.chaos.availability import window
from tests.chaos.checkers import s1_terms
from tests.chaos.harness import ROOT
from tests.chaos.nemesis import FAULTS
from tests.chaos.runner import RunResult, run_plan
from tests.chaos.state import read_state
from tests.tiers import needs

PATHS_STORMS = f"{ROOT}/storms"


def _assert_safe_and_recovered(result: RunResult) -> None:
    for fault in result.faults:
        w = window(result.history, fault)
        print(f"{fault.name} on {fault.target}: gap {w.gap}, after heal {w.after_heal}, "
              f"epoch {fault.epoch_before} -> {fault.epoch_after}")  # fmt: skip
    stuck = [f"{f.name}: {f.note}" for f in result.faults if not f.recovered]
    assert stuck == [], "\n".join(stuck) + result.logs
    moved = [
        f"{f.name}: epoch {f.epoch_before} -> {f.epoch_after}"
        for f in result.faults
        if FAULTS[f.name].target_at(result.session_timeout) == "same-leader"
        and window(result.history, f).leader_changed
    ]
    assert moved == [], f"faults the same leader must ride out changed it: {moved}"
    found = {k: v for k, v in result.violations.items() if v}
    assert found == {}, f"{found}\n{result.logs}"
    ok = [c for c in result.history.ok_writes() if c.kind == "submit"]
    assert ok, "the workload never got a submit through"


Plan = Callable[..., RunResult]


@pytest.fixture
@needs("slow")
def chaos_plan(healthy_ensemble: ZooKeeperCluster, tmp_path: Path) -> Plan:
    """``chaos_plan(faults, keep=False, ...)``: ``run_plan`` on the session's ensemble."""
    return partial(run_plan, healthy_ensemble, tmp_path)


def test_leader_crashes_pauses_and_a_damaged_package(chaos_plan: Plan) -> None:
    result = chaos_plan(
        ["sigkill-leader", "sigkill-leader", "pause-leader-2T", "truncate-then-kill"],
        keep=True,
    )
    try:
        _assert_safe_and_recovered(result)
        # The checker is live on this very state: a zombie's raw write of an old term shows.
        assert result.cluster is not None
        admin = result.cluster.admin()
        victim = next(c for c in result.history.ok_writes() if c.kind == "submit")
        stale = records.StormBase.FromString(admin.get(f"{PATHS_STORMS}/{victim.topology_id}")[0])
        stale.epoch = result.faults[0].epoch_before
        admin.set(f"{PATHS_STORMS}/{victim.topology_id}", stale.SerializeToString())
        found = s1_terms(read_state(admin, ROOT), result.history)
        assert len(found) == 1 and victim.topology_id in found[0], found
    finally:
        if result.cluster is not None:
            result.cluster.stop()


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(
            ["zk-cut-zk-to-leader", "zk-cut-leader-both", "clients-cut-leader", "sigterm-leader"],
            id="leader-cut-from-zookeeper-one-way-and-from-its-clients",
        ),
        pytest.param(
            ["zk-kill-leader", "zk-quorum-loss-T/2"],
            id="zookeeper-loses-its-leader-then-its-quorum",
        ),
    ],
)
def test_a_plan_of_faults_is_ridden_out_safely(chaos_plan: Plan, plan: list[str]) -> None:
    _assert_safe_and_recovered(chaos_plan(plan))


@pytest.mark.soak  # a ZooKeeper divergence it can provoke leaves no leader: see its fault
@pytest.mark.skipif(available() is not None, reason=f"kernel faults: {available()}")
def test_zookeepers_leader_server_ports_cut_one_way_by_the_kernel(chaos_plan: Plan) -> None:
    """iptables drops the ZooKeeper leader server's quorum and election traffic (what it
    opens still gets through): the ensemble elects another server, nothing unsafe
    happens, and writes resume."""
    result = chaos_plan(["zk-leader-ports-cut-one-way"])
    assert [f.note for f in result.faults] == [""], "the other servers never elected a leader"
    _assert_safe_and_recovered(result)
