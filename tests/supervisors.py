"""A real supervisor process for tests that run pipelines through the CLI."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.cluster import REPO
from tests.processes import stop_process
from tests.replica_fixtures import ROOT


def start_supervisor(
    zk_hosts: str, state: Path, log_path: Path, *, slots: int = 1, extra: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Supervisor ``sup-1`` with ``slots`` slots, heartbeating every 0.5 s, logging to
    ``log_path``; ``extra`` flags are appended."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [
                sys.executable, "-m", "nimbus.cmd_supervisor", "--zookeeper", zk_hosts,
                "--root", ROOT, "--id", "sup-1", "--host", "127.0.0.1", "--slots", str(slots),
                "--heartbeat-interval", "0.5", "--session-timeout", "6",
                "--state-dir", str(state), "--worker-stop-timeout", "30", *extra,
            ],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip


def stop_supervisor(supervisor: subprocess.Popen[bytes]) -> int:
    """SIGTERM (it stops its workers), SIGKILL after a minute; the exit code."""
    return stop_process(supervisor, 60)
