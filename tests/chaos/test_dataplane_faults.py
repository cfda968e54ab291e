"""The data plane through faults on the control plane, made by the kernel.

A real supervisor runs the word-count example's Spark worker while the Nimbus leader is
SIGKILLed, cut from ZooKeeper and frozen. The pipeline is the user's: its counts must stay
exact, it must not be restarted or moved by a failover, and ZooKeeper's own records must
show no two claims of its slot overlapping and every commit inside its claim.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.paths import Paths
from tests.chaos.kernel_cluster import ROOT, KernelCluster
from tests.chaos.kernel_faults import FAULTS
from tests.processes import cli_submit, cli_topology_id
from tests.supervisors import Command
from tests.test_dataplane_processes import ClaimHistory, Supervisor
from tests.test_workers import (
    add_input,
    corpus,
    counted,
    output_counts,
    wordcount_package,
)
from tests.waiting import wait_until

PATHS = Paths(ROOT)
T = 4.0
LEADER_FAULTS = ("sigkill", "zk-cut-both", "sigstop-2T")


@pytest.fixture
def cluster(kernel_cluster: type[KernelCluster], tmp_path: Path) -> Iterator[KernelCluster]:
    made = kernel_cluster(tmp_path, session_timeout=T, extra=("--schedule-interval", "0.5"))
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.mark.timeout(1200)  # one Spark start, three failovers; minutes on a busy machine
def test_a_running_pipeline_rides_through_leader_faults_with_exact_counts(
    cluster: KernelCluster, supervisor_command: Command, tmp_path: Path
) -> None:
    inbox, out = tmp_path / "input", tmp_path / "output"
    inbox.mkdir()
    package = wordcount_package(tmp_path, inbox, out)
    fed: list[str] = []

    def feed(i: int) -> None:
        part = corpus(100 + i, 1000)
        add_input(inbox, f"part-{i}.txt", part)
        fed.extend(part)

    def counts_exact(what: str) -> None:
        wait_until(
            lambda: output_counts(out) == counted(fed), timeout=300, interval=0.5, message=what
        )

    admin = cluster.admin()
    sup = Supervisor(
        supervisor_command, "sup-a", cluster.zk.connect_string, tmp_path, tmp_path / "checkpoints"
    )
    history = ClaimHistory()
    try:
        sup.start()
        wait_until(lambda: admin.exists(PATHS.supervisor("sup-a")), timeout=60)
        feed(0)
        cli_submit(package, "wordcount", cluster.seeds)
        tid = cli_topology_id("wordcount", cluster.seeds)
        history.watch(admin, tid)
        counts_exact("the first part counted")
        worker = sup.live_worker()
        assert worker is not None and history.holders() == [worker]

        for i, fault in enumerate(LEADER_FAULTS, start=1):
            leader, epoch = cluster.wait_healthy(120)
            feed(i)  # input arriving while the control plane fails over
            FAULTS[fault](cluster, leader, T)
            if not cluster.replicas[leader].alive():
                cluster.spawn(leader)
            _, after = cluster.wait_healthy(120)
            print(f"{fault}: epoch {epoch} -> {after}")
            counts_exact(f"input fed during {fault} counted")
            assert sup.live_worker() == worker, f"{fault}: the worker was restarted"
            assert history.holders() == [worker], f"{fault}: the slot moved"

        markers = history.check(admin, tid)
        assert markers, "the worker committed batches"
    finally:
        if sup.proc is not None and sup.proc.poll() is None:
            sup.proc.send_signal(signal.SIGTERM)
            try:
                sup.proc.wait(120)
            except subprocess.TimeoutExpired:
                sup.kill()
        left = sup.live_worker()
        if left is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(left, signal.SIGKILL)
