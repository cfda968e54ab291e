"""Workers end to end: a replica, a supervisor and its Spark worker as processes."""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter
from pathlib import Path

from code_sync.package import make_package
from pipeline.sinks import latest_by_key, read_batches
from tests.cluster import REPO, free_port, wait_for_agreed_leader
from tests.processes import cli_submit, nimbus_cli
from tests.replica_fixtures import Spawn, sync_flags
from tests.scrape import metric
from tests.supervisors import Command, start_supervisor, stop_supervisor
from tests.waiting import wait_until

EXAMPLE = REPO / "examples" / "wordcount"
VOCABULARY = ["storm", "spout", "bolt", "nimbus", "tuple", "stream", "spark", "worker", "slot"]


def wordcount_package(tmp_path: Path, inbox: Path, out: Path) -> Path:
    """The word-count example zipped with a ``config.json`` naming its folders."""
    config = {"input": str(inbox), "output": str(out), "parallelism": 2}
    return make_package(
        {
            "topology.py": (EXAMPLE / "topology.py").read_bytes(),
            "config.json": json.dumps(config).encode(),
        },
        tmp_path / "wordcount.zip",
    )


def add_input(inbox: Path, name: str, lines: list[str]) -> None:
    """Write elsewhere, then rename in: the files spout must never see half a file."""
    staging = inbox.parent / f".{name}"
    staging.write_text("".join(f"{line}\n" for line in lines))
    staging.rename(inbox / name)


def corpus(seed: int, lines: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCABULARY, k=rng.randint(1, 12))) for _ in range(lines)]


def counted(lines: list[str]) -> dict[str, int]:
    return dict(Counter(word for line in lines for word in line.split()))


def output_counts(out: Path) -> dict[str, int]:
    """The current count of each word, as the example's README says to read them."""
    return {key[0]: row["count"] for key, row in latest_by_key(read_batches(out), "word").items()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_worker_restarts_with_exact_counts_and_stops_when_killed(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path
) -> None:
    inbox, out, state = tmp_path / "input", tmp_path / "output", tmp_path / "supervisor"
    inbox.mkdir()
    package = wordcount_package(tmp_path, inbox, out)
    first, second, third = corpus(1, 3000), corpus(2, 3000), corpus(3, 500)
    add_input(inbox, "part-1.txt", first)

    replica = spawn(extra=sync_flags(min_replicas=1, replicas=1))
    log_path = tmp_path / "supervisor.log"
    metrics_port = free_port()
    supervisor = start_supervisor(
        supervisor_command,
        zk_hosts,
        state,
        log_path,
        slots=2,
        extra=("--metrics-port", str(metrics_port)),
    )
    try:
        wait_for_agreed_leader([replica], timeout=30)
        seeds = replica.address
        cli_submit(package, "wordcount", seeds)

        def worker_pid() -> int | None:
            pid_files = list(state.glob("workers/*/worker.pid"))
            return int(pid_files[0].read_text()) if pid_files else None

        def worker_states() -> list[str]:
            shown = nimbus_cli("describe", "wordcount", "--seeds", seeds, "--json")
            return [w["state"] for w in json.loads(shown.stdout)["workers"]]

        def counted_exactly(texts: list[str], restarts: int, message: str) -> None:
            """The output counts ``texts`` exactly, from one running worker restarted
            ``restarts`` times."""
            wait_until(
                lambda: output_counts(out) == counted(texts),
                timeout=120,
                interval=0.5,
                message=message,
            )
            assert worker_states() == ["running"]
            assert metric(metrics_port, "nimbus_supervisor_workers_running") == 1
            assert metric(metrics_port, "nimbus_supervisor_worker_restarts_total") == restarts

        counted_exactly(first, 0, "the first corpus counted exactly")
        killed = worker_pid()
        assert killed is not None and alive(killed)

        add_input(inbox, "part-2.txt", second)
        os.kill(killed, signal.SIGKILL)

        def new_worker() -> int | None:
            pid = worker_pid()
            return pid if pid != killed else None

        restarted = wait_until(new_worker, timeout=30, message="the supervisor's new worker")
        assert restarted is not None
        wait_until(lambda: not alive(killed), timeout=10, message="the killed worker reaped")
        add_input(inbox, "part-3.txt", third)
        everything = first + second + third
        counted_exactly(everything, 1, "all input counted exactly once after the restart")

        stopped = nimbus_cli("kill", "wordcount", "--seeds", seeds, "--wait", "0")
        assert stopped.returncode == 0, stopped.stderr
        wait_until(lambda: not alive(restarted), timeout=60, message="the worker to exit")
        # The supervisor logs the exit just after reaping the process: wait for the line.
        wait_until(
            lambda: "stopped (exit code 0)" in log_path.read_text(),
            timeout=10,
            message="the supervisor to log a clean stop",
        )
        assert metric(metrics_port, "nimbus_supervisor_workers_running") == 0
        assert output_counts(out) == counted(first + second + third)
    finally:
        assert stop_supervisor(supervisor) == 0
