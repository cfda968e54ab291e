"""``nimbus dev --demo``: the README's main job, end to end, as a user runs it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.zkserver import free_ports
from tests.cluster import REPO
from tests.supervisors import Command
from tests.waiting import wait_until


@pytest.mark.timeout(600)  # above the demo's own 420 s: a slow run keeps its output
def test_dev_demo_fails_over_mid_stream_and_the_cli_kill_stops_the_worker(
    dev_command: Command,
) -> None:
    """The leader-kill scenario, as the README's main job runs it."""
    base = free_ports(1)[0]
    done = subprocess.run(
        [
            *dev_command, "--demo",
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


@pytest.mark.timeout(180)
def test_dev_prints_its_seeds_and_says_when_a_replica_dies(tmp_path: Path) -> None:
    """``nimbus dev`` (no demo): the seeds line works with the CLI, and a replica killed
    under it is reported, not silently missing."""
    base = free_ports(1)[0]
    log = tmp_path / "dev.out"
    with log.open("w") as out:
        dev = subprocess.Popen(
            [
                sys.executable, "-u", "-m", "nimbus.cli", "dev", "--replicas", "2",
                "--supervisors", "0", "--base-port", str(base), "--workdir", str(tmp_path / "w"),
            ],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
    try:
        text = wait_until(
            lambda: "running; Ctrl-C" in (t := log.read_text()) and t, timeout=120, interval=0.2
        )
        assert text
        (seeds,) = re.findall(r"^seeds\s+(\S+)", text, re.MULTILINE)
        assert seeds == f"127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        leader = subprocess.run(
            [sys.executable, "-m", "nimbus.cli", "leader", "--seeds", seeds, "--json"],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )  # fmt: skip
        assert leader.returncode == 0, leader.stderr
        pid = int(re.findall(rf"127\.0\.0\.1:{base + 2}.*\(pid (\d+)", text)[0])
        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: f"replica 127.0.0.1:{base + 2} (pid {pid}) exited" in log.read_text(),
            timeout=30,
            message="nimbus dev reporting the dead replica",
        )
    finally:
        dev.send_signal(signal.SIGTERM)
        dev.wait(60)
