"""A sink's folder as Storm users treat it: a batch nobody can account for is refused and
reported, kill ``--wait`` drains before removal, and a resubmit into a killed topology's
folder takes it over without a failure. A replica, a supervisor with two slots and their
Spark workers as processes; everything read through the CLI."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.sinks import read_batches
from tests.processes import cli_submit, nimbus_cli
from tests.replica_fixtures import Spawn
from tests.supervisors import Command, replica_and_supervisor
from tests.test_workers import add_input, alive, corpus, counted, output_counts, wordcount_package
from tests.waiting import wait_until


@dataclass
class Setup:
    seeds: str
    state: Path
    log: Path

    def describe(self, name: str) -> dict[str, Any]:
        done = nimbus_cli("describe", name, "--seeds", self.seeds, "--json")
        assert done.returncode == 0, done.stderr
        view: dict[str, Any] = json.loads(done.stdout)
        return view

    def listed(self) -> list[dict[str, Any]]:
        done = nimbus_cli("list", "--seeds", self.seeds, "--json")
        assert done.returncode == 0, done.stderr
        rows: list[dict[str, Any]] = json.loads(done.stdout)
        return rows

    def counting(self, name: str, tmp: Path, lines: list[str]) -> tuple[Path, Path, Path]:
        """Submit the word count as ``name`` over ``lines``; (input, output, package) once
        its output counts them exactly."""
        inbox, out = tmp / "input", tmp / "output"
        inbox.mkdir()
        add_input(inbox, "part-1.txt", lines)
        package = wordcount_package(tmp, inbox, out)
        cli_submit(package, name, self.seeds)
        wait_until(lambda: output_counts(out) == counted(lines), timeout=240, interval=0.5,
                   message=f"{name}'s output exact")  # fmt: skip
        return inbox, out, package

    def worker_pids(self) -> dict[str, int]:
        """Each worker folder's pid, by folder name (it starts with the topology id)."""
        return {
            p.parent.name: int(p.read_text().split()[0])
            for p in self.state.glob("workers/*/worker.pid")
        }


@pytest.fixture
def setup(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path
) -> Iterator[Setup]:
    state, log = tmp_path / "supervisor", tmp_path / "supervisor.log"
    with replica_and_supervisor(
        spawn, supervisor_command, zk_hosts, state, log, slots=2
    ) as replica:
        yield Setup(replica.address, state, log)


@pytest.mark.timeout(600)
def test_a_planted_batch_is_reported_not_skipped(setup: Setup, tmp_path: Path) -> None:
    first = corpus(1, 500)
    inbox, out, _ = setup.counting("wc", tmp_path, first)
    newest = max(batch for batch, _ in read_batches(out))
    planted = out / f"batch-{newest + 1:012d}.jsonl"
    planted.write_text(json.dumps({"word": "planted", "count": 1}) + "\n")
    add_input(inbox, "part-2.txt", corpus(2, 100))  # its batch id is the planted one's

    def reported() -> dict[str, Any] | None:
        view = setup.describe("wc")
        return view if view["failing"] else None

    view = wait_until(reported, timeout=180, interval=1.0, message="the refusal reported")
    assert view is not None
    assert f"batch {newest + 1}" in view["last_error"], view["last_error"]
    assert "no checkpoint on record" in view["last_error"], view["last_error"]
    (row,) = [r for r in setup.listed() if r["name"] == "wc"]
    assert row["failing"] and "no checkpoint on record" in row["last_error"]
    assert planted.read_text() == json.dumps({"word": "planted", "count": 1}) + "\n"
    assert [b for b, _ in read_batches(out)][-1] == newest + 1, "nothing published past it"
    logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
    assert "skipped" not in logs and "already published" not in logs


@pytest.mark.timeout(600)
def test_kill_wait_drains_then_a_resubmit_takes_the_folder_without_failing(
    setup: Setup, tmp_path: Path
) -> None:
    """``kill --wait 10`` as in Storm: the worker stays (deactivated) for the wait, then
    goes. A topology resubmitted at once under another name into the same folder waits
    for it, takes the folder over and is never reported failing; its output is exact."""
    lines = corpus(3, 800)
    _, out, package = setup.counting("wc-a", tmp_path, lines)
    (worker_a,) = setup.worker_pids().values()

    killed = nimbus_cli("kill", "wc-a", "--wait", "10", "--seeds", setup.seeds)
    killed_at = time.monotonic()
    assert killed.returncode == 0, killed.stderr
    cli_submit(package, "wc-b", setup.seeds)

    def deactivated() -> bool:
        states = [w["state"] for w in setup.describe("wc-a")["workers"]]
        return bool(states) and all(s.startswith("inactive") for s in states)

    wait_until(deactivated, timeout=8, interval=0.2, message="wc-a's worker deactivated")
    failing_seen: list[dict[str, Any]] = []

    def a_gone() -> bool:
        failing_seen.extend(r for r in setup.listed() if r["name"] == "wc-b" and r["failing"])
        return not alive(worker_a)

    wait_until(a_gone, timeout=60, interval=0.3, message="wc-a's worker gone after the wait")
    drained = time.monotonic() - killed_at
    print(f"wc-a's worker stopped {drained:.1f} s after kill --wait 10")
    assert drained >= 9.0, f"the worker went after {drained:.1f} s, before its wait of 10 s"

    def b_exact() -> bool:
        failing_seen.extend(r for r in setup.listed() if r["name"] == "wc-b" and r["failing"])
        return output_counts(out) == counted(lines)

    archive = out / ".previous-"
    wait_until(lambda: (out / ".nimbus-topology").read_text().startswith("wc-b"), timeout=120,
               interval=0.5, message="wc-b owns the folder")  # fmt: skip
    wait_until(b_exact, timeout=240, interval=0.5, message="wc-b's own output exact")
    assert not failing_seen, failing_seen
    assert not setup.describe("wc-b")["failing"]
    archived = [p for p in out.iterdir() if p.name.startswith(archive.name)]
    assert len(archived) == 1 and output_counts(archived[0]) == counted(lines)
    assert os.path.isdir(archived[0] / "_nimbus" / "checkpoint"), "wc-a's checkpoint kept"
