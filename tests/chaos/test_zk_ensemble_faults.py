"""ZooKeeper's own faults under a CLI workload, with a 3-server ensemble (issue 31).

One cluster for the module; each fault, one per test, on a healthy cluster taking
writes: a ZooKeeper server Nimbus followers are connected to cut from its peers, the
Nimbus leader's server cut from its peers, the ZooKeeper leader cut from its peers (each
for 2T, then healed), and a rolling SIGKILL restart of every server. The kernel makes the
faults (``tests.chaos.kernel_ensemble``); the users are ``nimbus`` CLI processes with
default settings. What must hold over each test: no failed CLI call, no acknowledged
change lost or applied twice, never two replicas answering as the leader in one round of
polls (all three asked at once, every 50 ms), and never more than 5 s with none answering."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.cli_workload import CliWorkload
from tests.chaos.kernel_ensemble import (
    FAULTS,
    KernelEnsemble,
    LeadershipPolls,
    Poll,
    double_claims,
    longest_leaderless,
    run_fault,
)
from tests.chaos.kernel_faults import lost_or_duplicated
from tests.replica_fixtures import package

NO_LEADER_BOUND_S = 5.0  # issue 31: never longer with no replica claiming leadership
T = 4.0


@pytest.fixture(scope="module")
def ensemble(
    kernel_ensemble: type[KernelEnsemble], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KernelEnsemble]:
    made = kernel_ensemble(tmp_path_factory.mktemp("ensemble"), session_timeout=T)
    try:
        made.start(timeout=180)
        yield made
    finally:
        made.stop()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_zookeeper_fault_under_a_cli_workload(
    ensemble: KernelEnsemble, fault: str, tmp_path: Path
) -> None:
    path, _ = package(tmp_path, "zk")
    polls = LeadershipPolls([r.address for r in ensemble.replicas]).start()
    workload = CliWorkload(ensemble.seeds, path, workers=2, run_id=uuid.uuid4().hex[:6]).start()
    try:
        outcome = run_fault(ensemble, workload, polls, fault)
    finally:
        workload.stop()
        polls.stop()
    every, calls = polls.rounds(), workload.snapshot()
    print(outcome.figures())
    print(
        f"{fault}, the whole test: {len(calls)} CLI calls ({sum(c.ok for c in calls)} ok), "
        f"{len(every)} rounds of polls, longest with no leader {longest_leaderless(every):.2f} s"
    )
    assert [f"{c.op.value} {c.name}: {c.stderr}" for c in calls if not c.ok] == []
    assert lost_or_duplicated(ensemble, workload) == []
    assert double_claims(every) == []
    assert longest_leaderless(every) <= NO_LEADER_BOUND_S, outcome.figures()
    assert sum(c.ok and c.op.mutating for c in calls) >= 3


def test_the_leadership_figures_see_two_leaders_and_a_stretch_without_one() -> None:
    """The checkers can fail: a planted double claim and a planted 6 s stretch."""
    rounds = [Poll(0.0, {0: 1}), Poll(0.05, {0: 1, 1: 2}), Poll(0.1, {1: 2})]
    rounds += [Poll(0.1 + 0.05 * k, {}) for k in range(1, 120)]
    rounds += [Poll(6.1, {2: 3}), Poll(6.15, {2: 3}), Poll(7.0, {})]
    assert double_claims(rounds) == ["at 0.05: {0: 1, 1: 2}"]
    assert longest_leaderless(rounds) == pytest.approx(6.0)
    assert longest_leaderless(rounds[-3:]) == pytest.approx(0.85)  # open at the end
    assert longest_leaderless([Poll(0.0, {0: 1}), Poll(3.0, {0: 1})]) == 0.0
