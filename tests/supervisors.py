"""A real supervisor process for tests that run pipelines through the CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.cluster import REPO
from tests.replica_fixtures import ROOT


def start_supervisor(zk_hosts: str, state: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """One supervisor with one slot, heartbeating every 0.5 s, logging to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [
                sys.executable, "-m", "nimbus.cmd_supervisor", "--zookeeper", zk_hosts,
                "--root", ROOT, "--id", "sup-1", "--host", "127.0.0.1", "--slots", "1",
                "--heartbeat-interval", "0.5", "--session-timeout", "6",
                "--state-dir", str(state), "--worker-stop-timeout", "30",
            ],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip


def stop_supervisor(supervisor: subprocess.Popen[bytes]) -> None:
    """SIGTERM (it stops its workers), SIGKILL after a minute."""
    supervisor.send_signal(signal.SIGTERM)
    try:
        supervisor.wait(60)
    except subprocess.TimeoutExpired:
        supervisor.kill()
        supervisor.wait()
