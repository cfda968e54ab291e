"""``nimbus dev --demo``: the README's main job, end to end, as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devtools.zkserver import free_ports
from tests.cluster import REPO


@pytest.mark.timeout(600)  # above the demo's own 420 s: a slow run keeps its output
def test_dev_demo_fails_over_mid_stream_and_the_cli_kill_stops_the_worker() -> None:
    """The leader-kill scenario, as the README's main job runs it."""
    base = free_ports(1)[0]
    done = subprocess.run(
        [
            sys.executable, "-m", "nimbus.cli", "dev", "--demo",
            "--replicas", "2", "--supervisors", "1", "--base-port", str(base),
        ],
        capture_output=True, text=True, cwd=REPO, timeout=420,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"zookeeper        127.0.0.1:{base}" in out
    assert f"nimbus replica   127.0.0.1:{base + 1}" in out
    assert f"nimbus replica   127.0.0.1:{base + 2}" in out
    assert "supervisor       supervisor-1" in out
    assert "leader: 127.0.0.1:" in out and "(epoch 1)" in out
    assert "new leader: 127.0.0.1:" in out and "(epoch 2)" in out
    assert out.count(": ACTIVE,") == 2, out  # before and after the failover
    assert "worker supervisor-1/" in out
    # The word count ran on a real Spark worker and stayed exact through the failover.
    assert "counts exact:" in out
    assert "the new text was counted" in out
    assert "$ nimbus kill wordcount --wait 0 --seeds" in out
    assert "stopped; final counts exact: True" in out
