"""No row lost when a worker moves: ``nimbus dev --supervisors 2`` with its defaults.

A windowed topology (rolling top words) and a join (single join) run on the cluster a
user gets from ``nimbus dev``: no ``--checkpoint-dir``, each supervisor with a state
folder of its own. Their supervisor is SIGKILLed with its workers and their JVMs
mid-stream; the slots move to the other supervisor, which has never seen their
checkpoints. Then a supervisor comes back under the killed one's id with a fresh state
folder and the other is killed the same way. After each move more input arrives, and
the output must equal the plain-Python oracle exactly, with no batch skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from code_sync.package import make_package
from devtools.zkserver import free_ports
from tests.cluster import REPO
from tests.processes import nimbus_cli
from tests.supervisors import Command
from tests.test_examples import EXAMPLES, _oracle, joined_rows, window_rankings
from tests.test_workers import add_input
from tests.waiting import wait_until

MOVE_TIMEOUT = 120.0  # the bound: exact output within 2 minutes of the move


def _split(lines: list[str], parts: int) -> list[list[str]]:
    size = -(-len(lines) // parts)
    return [lines[i : i + size] for i in range(0, len(lines), size)]


class DevCluster:
    """``nimbus dev`` as a user runs it, read from its own output lines (``dev`` and
    ``supervisor``: the ``dev_command`` and ``supervisor_command`` fixtures)."""

    def __init__(self, dev: Command, supervisor: Command, tmp: Path, supervisors: int) -> None:
        self.supervisor_command = supervisor
        self.base = free_ports(1)[0]
        self.workdir = tmp / "dev"
        self.log = tmp / "dev.out"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [
                    *dev, "--replicas", "2",
                    "--supervisors", str(supervisors), "--base-port", str(self.base),
                    "--workdir", str(self.workdir),
                ],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
            )  # fmt: skip
        text = wait_until(
            lambda: "running; Ctrl-C" in (t := self.log.read_text()) and t,
            timeout=180,
            interval=0.2,
            message="nimbus dev running",
        )
        assert isinstance(text, str)
        (self.seeds,) = re.findall(r"^seeds\s+(\S+)", text, re.MULTILINE)
        (self.zookeeper,) = re.findall(r"^zookeeper\s+(\S+)", text, re.MULTILINE)
        self.supervisor_pids = {
            name: int(pid)
            for name, pid in re.findall(r"^supervisor\s+(\S+)\s+\(pid (\d+)", text, re.MULTILINE)
        }
        self.extra: list[subprocess.Popen[bytes]] = []

    def describe(self, name: str) -> dict[str, Any]:
        done = nimbus_cli("describe", name, "--seeds", self.seeds, "--json")
        assert done.returncode == 0, done.stderr
        view: dict[str, Any] = json.loads(done.stdout)
        return view

    def supervisor_of(self, name: str) -> str | None:
        """The one supervisor whose worker of ``name`` runs and beats, if exactly one."""
        hosts = {
            w["supervisor"]
            for w in self.describe(name)["workers"]
            if w["state"] == "running" and w["heartbeat_age_s"] < 5
        }
        return hosts.pop() if len(hosts) == 1 else None

    def kill_supervisor(self, name: str, state: Path, pid: int) -> None:
        """SIGKILL the supervisor, then each of its workers' process groups (the worker and
        its Spark JVM): the host is gone, nothing of it stops cleanly."""
        os.kill(pid, signal.SIGKILL)
        for pid_file in state.glob("workers/*/worker.pid"):
            worker = int(pid_file.read_text().split()[0])
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker, signal.SIGKILL)

    def start_supervisor(self, name: str, state: Path, log: Path) -> int:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    *self.supervisor_command, "--zookeeper", self.zookeeper, "--id", name,
                    "--slots", "4", "--heartbeat-interval", "1",
                    "--session-timeout", "4",
                    "--state-dir", str(state),
                ],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
            )  # fmt: skip
        self.extra.append(proc)
        return proc.pid

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in self.workdir.rglob("*.log") if p.is_file()
        )

    def stop(self) -> None:
        for proc in self.extra:
            proc.send_signal(signal.SIGTERM)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for proc in self.extra:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.mark.timeout(1200)
def test_windows_and_a_join_stay_exact_when_their_supervisor_dies(
    dev_command: Command, supervisor_command: Command, tmp_path: Path
) -> None:
    rtw, join = _oracle("rolling-top-words"), _oracle("single-join")
    rtw_in, rtw_out = tmp_path / "rtw-in", tmp_path / "rtw-out"
    sides = {side: tmp_path / f"join-{side}" for side in ("gender", "age")}
    join_out = tmp_path / "join-out"
    for folder in (rtw_in, *sides.values()):
        folder.mkdir()
    rtw_corpus = [
        line
        for path in sorted((EXAMPLES / "rolling-top-words" / "corpus").iterdir())
        for line in path.read_text().splitlines()
    ]
    join_corpus = {
        side: [
            line
            for path in sorted((EXAMPLES / "single-join" / "corpus" / side).iterdir())
            for line in path.read_text().splitlines()
        ]
        for side in sides
    }
    rtw_parts = _split(rtw_corpus, 3)
    join_parts = {side: _split(lines, 3) for side, lines in join_corpus.items()}
    fed: dict[str, list[str]] = {"rtw": [], "gender": [], "age": []}

    def feed(phase: int) -> None:
        add_input(rtw_in, f"events-{phase}.txt", rtw_parts[phase])
        fed["rtw"] += rtw_parts[phase]
        for side, folder in sides.items():
            add_input(folder, f"{side}-{phase}.txt", join_parts[side][phase])
            fed[side] += join_parts[side][phase]

    def exact() -> bool:
        windows_ok: bool = window_rankings(rtw_out) == rtw.rankings(fed["rtw"])
        joins_ok: bool = joined_rows(join_out) == join.joined(fed["gender"], fed["age"])
        return windows_ok and joins_ok

    def wait_exact(what: str, timeout: float) -> None:
        wait_until(exact, timeout=timeout, interval=1.0, message=what)

    cluster = DevCluster(dev_command, supervisor_command, tmp_path, supervisors=2)
    try:
        join_config = {**{k: str(v) for k, v in sides.items()}, "output": str(join_out)}
        for name, example, config in (
            ("rtw", "rolling-top-words", {"input": str(rtw_in), "output": str(rtw_out)}),
            ("join", "single-join", join_config),
        ):
            code = {"topology.py": (EXAMPLES / example / "topology.py").read_bytes()}
            package = make_package(code, tmp_path / f"{name}.zip")
            done = nimbus_cli(
                "submit", str(package), "--name", name, "--config-json", json.dumps(config),
                "--seeds", cluster.seeds,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
        feed(0)
        wait_exact("both outputs equal their oracles before any move", 420)
        assert len(window_rankings(rtw_out)) >= 3 and len(joined_rows(join_out)) > 30

        # Move 1: the supervisor running the windows dies with its workers.
        first = wait_until(lambda: cluster.supervisor_of("rtw"), timeout=60, message="rtw's host")
        assert isinstance(first, str)
        cluster.kill_supervisor(first, cluster.workdir / first, cluster.supervisor_pids[first])
        feed(1)
        other = next(name for name in cluster.supervisor_pids if name != first)
        moved: Callable[[], bool] = lambda: (  # noqa: E731
            cluster.supervisor_of("rtw") == other and cluster.supervisor_of("join") == other
        )
        wait_until(moved, timeout=MOVE_TIMEOUT, interval=1.0, message="both slots moved")
        wait_exact("exact output after the first move", MOVE_TIMEOUT)

        # Move 2: the killed supervisor is back with a fresh state folder; the other dies.
        fresh = tmp_path / "fresh-state"
        cluster.start_supervisor(first, fresh, tmp_path / "fresh.log")
        cluster.kill_supervisor(other, cluster.workdir / other, cluster.supervisor_pids[other])
        feed(2)
        back: Callable[[], bool] = lambda: (  # noqa: E731
            cluster.supervisor_of("rtw") == first and cluster.supervisor_of("join") == first
        )
        wait_until(back, timeout=MOVE_TIMEOUT, interval=1.0, message="both slots on the fresh one")
        wait_exact("exact output after the move to a fresh state folder", MOVE_TIMEOUT)

        logs = cluster.logs() + (tmp_path / "fresh.log").read_text(errors="replace")
        logs += "\n".join(p.read_text(errors="replace") for p in fresh.rglob("*.log"))
        assert "skipped" not in logs and "already published" not in logs
        for name in ("rtw", "join"):
            view = cluster.describe(name)
            assert view["status"] == "ACTIVE" and not view["failing"], view
    finally:
        cluster.stop()
