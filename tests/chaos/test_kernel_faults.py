"""Kernel-made faults on the leader, seen through the ``nimbus`` CLI with default settings.

Runs where network namespaces and iptables can be made (root; CI runs as root). The
figures (failover, unavailability) are printed and measured by ``bench/chaos_cli.py``;
this test asserts what a user must never see: a failed call, or an acknowledged change
lost or applied twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.netns import available
from tests.chaos.cli_workload import CliWorkload
from tests.chaos.kernel_cluster import KernelCluster
from tests.chaos.kernel_faults import Trial, lost_or_duplicated, measure, run_trial
from tests.replica_fixtures import package

pytestmark = pytest.mark.skipif(available() is not None, reason=f"kernel faults: {available()}")

FAULTS = ("sigkill", "sigstop-2T", "zk-cut-both", "clients-cut")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KernelCluster]:
    made = KernelCluster(tmp_path, session_timeout=4.0)
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.mark.timeout(900)
def test_cli_calls_ride_through_kernel_faults_on_the_leader(
    cluster: KernelCluster, tmp_path: Path
) -> None:
    path, _ = package(tmp_path, "cli")
    workload = CliWorkload(cluster.seeds, path, workers=2, run_id=uuid.uuid4().hex[:6]).start()
    trials: list[Trial] = []
    try:
        for fault in FAULTS:
            trials.append(run_trial(cluster, workload, fault))
    finally:
        workload.stop()
    measure(cluster, workload, trials)
    for t in trials:
        print(
            f"{t.fault}: failover {t.failover_s}, unavailability {t.unavailability_s}, "
            f"epochs {t.epoch_before}->{t.epoch_after}, failed {len(t.failed)}"
        )
    failed = [f"{c.op.value} {c.name}: {c.stderr}" for t in trials for c in t.failed]
    assert failed == []
    assert lost_or_duplicated(cluster, workload) == []
    assert sum(1 for c in workload.snapshot() if c.ok) > 10
