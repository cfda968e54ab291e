"""Real supervisor processes for tests that run pipelines through the CLI.

Their workers run pipelines on Spark, so the command lines that start them come from
fixtures carrying the ``spark`` tier marker (``tests.tiers``): ``supervisor_command`` for
``nimbus supervisor`` with workers, ``dev_command`` for ``nimbus dev`` with supervisors.
A supervisor started with ``--no-workers`` starts no Spark and needs neither.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cluster import REPO, Replica, wait_for_agreed_leader
from tests.processes import stop_process
from tests.replica_fixtures import ROOT, Spawn, sync_flags
from tests.tiers import needs

Command = tuple[str, ...]


@pytest.fixture(scope="session")
@needs("spark")
def supervisor_command() -> Command:
    """``nimbus supervisor``: its workers run the assigned pipelines on Spark."""
    return (sys.executable, "-m", "nimbus.cli.cmd_supervisor")


@pytest.fixture(scope="session")
@needs("spark")
def dev_command() -> Command:
    """``nimbus dev`` (unbuffered, its lines read as they come), for a cluster with
    supervisors: their workers run the submitted pipelines on Spark."""
    return (sys.executable, "-u", "-m", "nimbus.cli", "dev")


def start_supervisor(
    command: Command,
    zk_hosts: str,
    state: Path,
    log_path: Path,
    *,
    slots: int = 1,
    extra: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Supervisor ``sup-1`` (``command``: the ``supervisor_command`` fixture) with
    ``slots`` slots, heartbeating every 0.5 s, logging to ``log_path``; ``extra`` flags are
    appended."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [
                *command, "--zookeeper", zk_hosts,
                "--root", ROOT, "--id", "sup-1", "--host", "127.0.0.1", "--slots", str(slots),
                "--heartbeat-interval", "0.5", "--session-timeout", "6",
                "--state-dir", str(state), "--worker-stop-timeout", "30", *extra,
            ],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip


def stop_supervisor(supervisor: subprocess.Popen[bytes]) -> int:
    """SIGTERM (it stops its workers), SIGKILL after a minute; the exit code."""
    return stop_process(supervisor, 60)


@contextmanager
def replica_and_supervisor(
    spawn: Spawn,
    command: Command,
    zk_hosts: str,
    state: Path,
    log_path: Path,
    *,
    replica_flags: Sequence[str] = (),
    slots: int = 1,
) -> Iterator[Replica]:
    """A replica that leads (the copies a submit waits for: itself) and ``sup-1``, stopped
    on the way out: where a pipeline test submits its topology."""
    replica = spawn(extra=(*sync_flags(min_replicas=1, replicas=1), *replica_flags))
    supervisor = start_supervisor(command, zk_hosts, state, log_path, slots=slots)
    try:
        wait_for_agreed_leader([replica], timeout=30)
        yield replica
    finally:
        stop_supervisor(supervisor)
