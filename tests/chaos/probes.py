"""What a fault trial sends on purpose, beside the workload, and reads back afterwards.

- :class:`ProbeSubmit`: one ``nimbus submit`` of a *fresh* package (a digest no replica
  holds yet, so the leader must get it onto a second replica before acknowledging: the
  workload's own package is on every replica long before) started at a chosen moment of a
  fault, on a thread of its own;
- :class:`BenchSupervisor`: a ``nimbus supervisor --no-workers`` (slots and heartbeats, no
  Spark), so the leader's scheduler has somewhere to place topologies and "scheduled" can
  be read from ``/assignments``;
- :func:`assigned_at`: when a topology got its slots (the record's ``assigned_ms``).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths
from tests.cluster import REPO
from tests.processes import stop_process
from tests.replica_fixtures import package
from tests.waiting import wait_until


@dataclass
class ProbeResult:
    name: str
    digest: str
    start: float = 0.0  # wall clock
    end: float = 0.0
    code: int | None = None
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.code == 0


class ProbeSubmit:
    """``nimbus submit`` of a fresh package named ``name``, through every seed, with the
    CLI's defaults; :meth:`start` returns at once, :meth:`join` waits for the answer."""

    def __init__(self, seeds: str, workdir: Path, name: str) -> None:
        path, digest = package(workdir, name)
        self._path = path
        self._seeds = seeds
        self.result = ProbeResult(name, digest)
        self._thread = threading.Thread(target=self._run, name=f"probe-{name}", daemon=True)

    def start(self) -> ProbeSubmit:
        self.result.start = time.time()
        self._thread.start()
        return self

    def join(self, timeout: float = 300.0) -> ProbeResult:
        self._thread.join(timeout)
        return self.result

    def _run(self) -> None:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "nimbus.cli", "submit", str(self._path), "--name",
                 self.result.name, "--seeds", self._seeds],
                cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            self.result.code = done.returncode
            self.result.stderr = done.stderr.strip()[-500:]
        except subprocess.TimeoutExpired:
            self.result.code, self.result.stderr = -1, "no answer in 300 s"
        self.result.end = time.time()


class BenchSupervisor:
    """One supervisor process without workers; :meth:`stop` (SIGTERM) leaves cleanly."""

    def __init__(
        self, zookeeper: str, root: str, workdir: Path, *, sid: str = "bench-sup", slots: int = 64
    ) -> None:
        self.sid = sid
        self._root = root
        self.log_path = workdir / f"supervisor-{sid}.log"
        self._cmd = [
            sys.executable, "-m", "nimbus.cli.cmd_supervisor", "--zookeeper", zookeeper,
            "--root", root, "--id", sid, "--host", "127.0.0.1", "--slots", str(slots),
            "--heartbeat-interval", "1", "--session-timeout", "10", "--no-workers",
            "--state-dir", str(workdir / f"supervisor-{sid}"),
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, admin: KazooClient, timeout: float = 60.0) -> BenchSupervisor:
        """Start it and return once it is registered."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        path = Paths(self._root).supervisor(self.sid)
        wait_until(lambda: admin.exists(path) is not None, timeout=timeout, interval=0.1,
                   message=f"supervisor {self.sid} registered")  # fmt: skip
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 20)
            self.proc = None


def topology_of(admin: KazooClient, root: str, name: str) -> str | None:
    """The id of the topology named ``name`` (None when no such name is recorded)."""
    try:
        return admin.get(Paths(root).name(name))[0].decode() or None
    except NoNodeError:
        return None


def assigned_at(admin: KazooClient, root: str, topology_id: str) -> float | None:
    """Wall time the topology's current assignment with slots was made (None: no slots)."""
    try:
        data = admin.get(Paths(root).assignment(topology_id))[0]
    except NoNodeError:
        return None
    assignment = records.Assignment.FromString(data)
    return assignment.assigned_ms / 1000.0 if assignment.slots else None


def scheduled(
    admin: KazooClient, root: str, name: str, *, timeout: float, since: float = 0.0
) -> dict[str, Any]:
    """Wait up to ``timeout`` s for topology ``name`` to be assigned; what was found:
    ``topology_id``, ``assigned`` and ``assigned_after_s`` (from ``since``, wall)."""
    found: dict[str, Any] = {"topology_id": None, "assigned": False, "assigned_after_s": None}

    def look() -> bool:
        tid = found["topology_id"] = found["topology_id"] or topology_of(admin, root, name)
        at = assigned_at(admin, root, tid) if tid else None
        if at is not None:
            found["assigned"], found["assigned_after_s"] = True, round(at - since, 2)
        return at is not None

    with contextlib.suppress(AssertionError):  # not assigned in time: found says so
        wait_until(look, timeout=timeout, interval=0.25, message=f"{name} assigned")
    return found
