"""``nimbus dev --demo``: the README's main job, end to end, as a user runs it."""

from __future__ import annotations

import subprocess
import sys

from nimbus.zkserver import free_ports
from tests.cluster import REPO


def test_dev_demo_fails_over_with_the_topology_still_active_and_exits_0() -> None:
    base = free_ports(1)[0]
    done = subprocess.run(
        [
            sys.executable, "-m", "nimbus.cli", "dev", "--demo",
            "--replicas", "2", "--supervisors", "1", "--base-port", str(base),
        ],
        capture_output=True, text=True, cwd=REPO, timeout=240,
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
