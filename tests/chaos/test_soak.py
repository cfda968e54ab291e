"""The soak, under ``-m soak`` (deselected by default: hours, not minutes).

Every fault of the proxy matrix ``NIMBUS_SOAK_TRIALS`` times (default 20) on its own
fresh cluster, checked by S1-S4; and, where the kernel can make faults (root), the CLI
matrix of ``tests.chaos.kernel_faults`` as many times, with no failed call. The figures of
a soak come from ``bench/chaos.py`` and ``bench/chaos_cli.py``, which run the same code.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from devtools.netns import available
from devtools.zkserver import ZooKeeperCluster
from tests.chaos.cli_workload import CliWorkload
from tests.chaos.kernel_cluster import KernelCluster
from tests.chaos.kernel_faults import FAULTS as KERNEL_FAULTS
from tests.chaos.kernel_faults import lost_or_duplicated, measure, run_trial
from tests.chaos.nemesis import FAULTS
from tests.chaos.runner import run_fault
from tests.replica_fixtures import package

pytestmark = [pytest.mark.soak, pytest.mark.timeout(4 * 3600)]
TRIALS = int(os.environ.get("NIMBUS_SOAK_TRIALS", "20"))


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_soak_proxy_faults(fault: str, healthy_ensemble: ZooKeeperCluster, tmp_path: Path) -> None:
    if FAULTS[fault].needs_root and os.geteuid() != 0:
        pytest.skip(f"{fault} needs root")
    result = run_fault(healthy_ensemble, tmp_path, fault, TRIALS)
    assert [f.note for f in result.faults if not f.recovered] == [], result.logs
    assert {k: v for k, v in result.violations.items() if v} == {}, result.logs


@pytest.mark.skipif(available() is not None, reason=f"kernel faults: {available()}")
def test_soak_kernel_faults_through_the_cli(tmp_path: Path) -> None:
    cluster = KernelCluster(tmp_path, session_timeout=4.0)
    try:
        cluster.start()
        path, _ = package(tmp_path, "soak")
        workload = CliWorkload(cluster.seeds, path, run_id=uuid.uuid4().hex[:6]).start()
        try:
            trials = [run_trial(cluster, workload, f) for _ in range(TRIALS) for f in KERNEL_FAULTS]
        finally:
            workload.stop()
        measure(cluster, workload, trials)
        assert [f"{c.op.value} {c.name}: {c.stderr}" for t in trials for c in t.failed] == []
        assert lost_or_duplicated(cluster, workload) == []
    finally:
        cluster.stop()
