"""A workload of ``nimbus`` CLI processes with default settings, as users run them.

Each worker repeats: submit a new topology, list, kill the topology it submitted. Every
call is its own process with no flag beyond ``--seeds`` (all replicas) and the required
arguments, so what is measured is what a user of the CLI sees: its default deadline,
discovery, retries and error messages.
"""

from __future__ import annotations

import enum
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.loops import Loops
from tests.cluster import REPO

_EPOCH = re.compile(r"\(epoch (\d+),")


class Op(enum.Enum):
    SUBMIT = "submit"
    LIST = "list"
    KILL = "kill"

    @property
    def mutating(self) -> bool:
        return self is not Op.LIST


@dataclass
class CliCall:
    worker: int
    op: Op
    name: str
    start: float  # wall clock (time.time), comparable with ZooKeeper's ctime
    end: float = 0.0
    code: int | None = None
    stderr: str = ""
    epoch: int = 0  # the epoch of the leader that acknowledged it (changes only)

    @property
    def ok(self) -> bool:
        return self.code == 0


class CliWorkload(Loops):
    def __init__(self, seeds: str, package: Path, *, workers: int = 2, run_id: str = "r") -> None:
        super().__init__(self._work, range(workers), name="cli", join_s=120)
        self._seeds = seeds
        self._package = package
        self._run_id = run_id
        self._lock = threading.Lock()
        self.calls: list[CliCall] = []

    def snapshot(self) -> list[CliCall]:
        with self._lock:
            return list(self.calls)

    def _work(self, worker: int) -> None:
        n = 0
        while not self.stopping.is_set():
            n += 1
            name = f"{self._run_id}-w{worker}-{n}"
            submitted = self._call(worker, Op.SUBMIT, name)
            if self.stopping.is_set():
                return
            self._call(worker, Op.LIST, "")
            if submitted.ok and not self.stopping.is_set():
                self._call(worker, Op.KILL, name)

    def _call(self, worker: int, op: Op, name: str) -> CliCall:
        args = {
            Op.SUBMIT: ["submit", str(self._package), "--name", name],
            Op.LIST: ["list", "--json"],
            Op.KILL: ["kill", name, "--json"],
        }[op]
        call = CliCall(worker, op, name, start=time.time())
        done = subprocess.run(
            [sys.executable, "-m", "nimbus.cli", *args, "--seeds", self._seeds],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        call.end = time.time()
        call.code = done.returncode
        call.stderr = done.stderr.strip()[-500:]
        if op is Op.KILL and call.ok:
            answer = json.loads(done.stdout)
            call.epoch = int(answer.get("epoch", 0))
            if answer.get("status") != "KILLED":
                call.code, call.stderr = -1, f"kill answered {done.stdout.strip()}"
        if op is Op.SUBMIT and call.ok:
            found = _EPOCH.search(done.stdout)
            call.epoch = int(found.group(1)) if found else 0
        with self._lock:
            self.calls.append(call)
        return call
