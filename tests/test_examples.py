"""storm-starter's examples as packages: each one's output equals its plain-Python oracle."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pyspark.sql import SparkSession

from code_sync.package import make_package
from pipeline.package import load_topology
from pipeline.progress import Progress
from pipeline.runner import run
from pipeline.sinks import latest_by_key, read_batches
from tests.cluster import REPO
from tests.processes import nimbus_cli
from tests.replica_fixtures import Spawn
from tests.supervisors import Command, replica_and_supervisor
from tests.test_workers import add_input
from tests.waiting import wait_until

EXAMPLES = REPO / "examples"


def _oracle(example: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"oracle_{example}", EXAMPLES / example / "oracle.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _epoch(value: Any) -> int:
    stamp = datetime.fromisoformat(str(value))
    return int(stamp.replace(tzinfo=stamp.tzinfo or UTC).timestamp())


def window_rankings(out: Path) -> dict[int, list[tuple[str, int]]]:
    """The sink's rows as window start -> [(word, count)] in rank order; each window once."""
    found: dict[int, list[tuple[int, str, int]]] = {}
    for _, rows in read_batches(out):
        for row in rows:
            start = _epoch(row["window"]["start"])
            found.setdefault(start, []).append((row["rank"], row["word"], row["count"]))
    return {
        start: [(w, c) for _, w, c in sorted(ranked)] for start, ranked in sorted(found.items())
    }


def test_rolling_top_words_equals_its_oracle(spark: SparkSession, tmp_path: Path) -> None:
    """Then a row later than the watermark: dropped, no ranking changes, counted late."""
    oracle = _oracle("rolling-top-words")
    folder = EXAMPLES / "rolling-top-words"
    inbox, out = tmp_path / "in", tmp_path / "out"
    shutil.copytree(folder / "corpus", inbox)
    topology = load_topology(folder, config={"input": str(inbox), "output": str(out)})
    with run(topology, spark, tmp_path / "checkpoint", name="rtw") as running:
        assert running.await_termination(timeout=300)
    lines = _lines(inbox)
    expected = oracle.rankings(lines)
    assert expected, "the corpus closes some windows"
    assert window_rankings(out) == expected
    (inbox / "late.txt").write_text(
        "2026-01-01T00:00:01Z storm\n" * 50 + "2026-01-01T00:00:02Z bolt\n"
    )
    with run(topology, spark, tmp_path / "checkpoint", name="rtw") as running:
        assert running.await_termination(timeout=300)
        progress = Progress()
        progress.update(running, now=0.0)
    assert window_rankings(out) == expected, "a late row changes no written ranking"
    (counts,) = (c for c in progress.components({"counts": 2}) if c.component == "counts")
    # Spark counts late rows where state is kept, after its partial aggregation: one per
    # window and key, so each late word counts once in each of its 3 sliding windows.
    assert counts.late_rows == 2 * 3


@pytest.mark.timeout(600)
def test_rolling_top_words_through_nimbus_survives_a_worker_sigkill(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path
) -> None:
    """Submitted with ``nimbus submit``, run by a supervisor's worker that is SIGKILLed
    mid-stream: every closed window ranked exactly once, as the oracle says."""
    oracle = _oracle("rolling-top-words")
    folder = EXAMPLES / "rolling-top-words"
    inbox, out, state = tmp_path / "input", tmp_path / "output", tmp_path / "supervisor"
    inbox.mkdir()
    first, second = (p.read_text().splitlines() for p in sorted((folder / "corpus").iterdir()))
    package = make_package(
        {"topology.py": (folder / "topology.py").read_bytes()}, tmp_path / "rtw.zip"
    )
    with replica_and_supervisor(
        spawn, supervisor_command, zk_hosts, state, tmp_path / "supervisor.log"
    ) as replica:
        config = json.dumps({"input": str(inbox), "output": str(out)})
        done = nimbus_cli(
            "submit",
            str(package),
            "--name",
            "rtw",
            "--config-json",
            config,
            "--seeds",
            replica.address,
        )
        assert done.returncode == 0, done.stderr
        add_input(inbox, "events-0001.txt", first)
        wait_until(lambda: len(window_rankings(out)) >= 3, timeout=300, interval=0.5,
                   message="rankings of the first windows")  # fmt: skip
        (pid_file,) = state.glob("workers/*/worker.pid")
        killed = int(pid_file.read_text().split()[0])
        os.kill(killed, signal.SIGKILL)
        add_input(inbox, "events-0002.txt", second)
        expected = oracle.rankings([*first, *second])
        wait_until(lambda: window_rankings(out) == expected, timeout=300, interval=1.0,
                   message="every closed window ranked once, as the oracle says")  # fmt: skip
        assert any(
            int(p.read_text().split()[0]) != killed for p in state.glob("workers/*/worker.pid")
        ), "a new worker ran after the SIGKILL"


def _windows(out: Path) -> dict[int, dict[str, Any]]:
    """Window start -> the sink's row without its window; fails on a window written twice."""
    found: dict[int, dict[str, Any]] = {}
    for _, rows in read_batches(out):
        for row in rows:
            start = _epoch(row.pop("window")["start"])
            assert start not in found, f"window {start} written twice"
            found[start] = row
    return dict(sorted(found.items()))


def test_sliding_and_tumbling_windows_equal_their_oracle(
    spark: SparkSession, tmp_path: Path
) -> None:
    oracle = _oracle("sliding-window")
    folder = EXAMPLES / "sliding-window"
    out = _run_example(spark, tmp_path, "sliding-window")
    lines = (folder / "corpus" / "events-0001.txt").read_text().splitlines()
    assert _windows(out / "sliding") == oracle.sliding(lines)
    tumbling = _windows(out / "tumbling")
    expected = oracle.tumbling(lines)
    assert tumbling.keys() == expected.keys()
    for start, row in tumbling.items():
        assert row["count"] == expected[start]["count"]
        assert row["avg"] == pytest.approx(expected[start]["avg"])


def _run_example(spark: SparkSession, tmp_path: Path, example: str, **config: str) -> Path:
    """Run an example over its corpus to the end in one Spark session; its output folder."""
    out = tmp_path / "out"
    topology = load_topology(EXAMPLES / example, config={"output": str(out), **config})
    with run(topology, spark, tmp_path / "checkpoint", name=example) as running:
        assert running.await_termination(timeout=300)
    return out


def _lines(folder: Path) -> list[str]:
    return [line for p in sorted(folder.iterdir()) for line in p.read_text().splitlines()]


def test_branch_streams_equal_their_oracle(spark: SparkSession, tmp_path: Path) -> None:
    oracle = _oracle("branch")
    folder = EXAMPLES / "branch"
    out = _run_example(spark, tmp_path, "branch")
    expected = oracle.streams(_lines(folder / "corpus"))
    for stream in ("even", "odd"):
        got = Counter(row["n"] for _, rows in read_batches(out / stream) for row in rows)
        assert got == expected[stream], stream


def joined_rows(out: Path) -> list[tuple[int, str, int, int, int]]:
    return sorted(
        (row["id"], row["gender"], _epoch(row["gender_ts"]), row["age"], _epoch(row["age_ts"]))
        for _, rows in read_batches(out)
        for row in rows
    )


def test_single_join_equals_its_oracle(spark: SparkSession, tmp_path: Path) -> None:
    oracle = _oracle("single-join")
    folder = EXAMPLES / "single-join"
    out = _run_example(spark, tmp_path, "single-join")
    corpus = folder / "corpus"
    expected = oracle.joined(_lines(corpus / "gender"), _lines(corpus / "age"))
    assert len(expected) > 100
    assert joined_rows(out) == expected


@pytest.mark.timeout(600)
def test_single_join_through_nimbus_survives_a_worker_sigkill(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path
) -> None:
    """Both inputs' second halves arrive after the worker was SIGKILLed: every pair
    joined once, as the oracle says (the join's state came back from the checkpoint)."""
    oracle = _oracle("single-join")
    corpus = EXAMPLES / "single-join" / "corpus"
    inputs = {side: tmp_path / side for side in ("gender", "age")}
    out, state = tmp_path / "output", tmp_path / "supervisor"
    for folder in inputs.values():
        folder.mkdir()
    code = {"topology.py": (EXAMPLES / "single-join" / "topology.py").read_bytes()}
    package = make_package(code, tmp_path / "join.zip")
    with replica_and_supervisor(
        spawn, supervisor_command, zk_hosts, state, tmp_path / "supervisor.log"
    ) as replica:
        seeds = replica.address
        config = json.dumps({**{k: str(v) for k, v in inputs.items()}, "output": str(out)})
        done = nimbus_cli(
            "submit", str(package), "--name", "join", "--config-json", config, "--seeds", seeds
        )
        assert done.returncode == 0, done.stderr
        halves = {side: sorted((corpus / side).iterdir()) for side in inputs}
        for side, folder in inputs.items():
            add_input(folder, halves[side][0].name, halves[side][0].read_text().splitlines())
        first = oracle.joined(*(halves[s][0].read_text().splitlines() for s in ("gender", "age")))
        wait_until(lambda: len(joined_rows(out)) >= len(first) // 2, timeout=300, interval=0.5,
                   message="pairs of the first halves joined")  # fmt: skip
        (pid_file,) = state.glob("workers/*/worker.pid")
        killed = int(pid_file.read_text().split()[0])
        os.kill(killed, signal.SIGKILL)
        for side, folder in inputs.items():
            add_input(folder, halves[side][1].name, halves[side][1].read_text().splitlines())
        expected = oracle.joined(_lines(corpus / "gender"), _lines(corpus / "age"))
        wait_until(lambda: joined_rows(out) == expected, timeout=300, interval=1.0,
                   message="every pair joined once, as the oracle says")  # fmt: skip


def _sliding_produced(out: Path) -> object:
    tumbling = {s: {**r, "avg": round(r["avg"], 9)} for s, r in _windows(out / "tumbling").items()}
    return _windows(out / "sliding"), tumbling


def _sliding_expected(oracle: ModuleType, lines: list[str]) -> object:
    tumbling = {s: {**r, "avg": round(r["avg"], 9)} for s, r in oracle.tumbling(lines).items()}
    return oracle.sliding(lines), tumbling


def _branch_produced(out: Path) -> object:
    return {
        stream: Counter(row["n"] for _, rows in read_batches(out / stream) for row in rows)
        for stream in ("even", "odd")
    }


CLI_EXAMPLES = {
    "sliding-window": (_sliding_expected, _sliding_produced),
    "branch": (lambda oracle, lines: oracle.streams(lines), _branch_produced),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("example", list(CLI_EXAMPLES))
def test_an_example_through_nimbus_submit_equals_its_oracle(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path, example: str
) -> None:
    expect, produced = CLI_EXAMPLES[example]
    folder = EXAMPLES / example
    inbox, out, state = tmp_path / "input", tmp_path / "output", tmp_path / "supervisor"
    shutil.copytree(folder / "corpus", inbox)
    code = {"topology.py": (folder / "topology.py").read_bytes()}
    package = make_package(code, tmp_path / f"{example}.zip")
    with replica_and_supervisor(
        spawn, supervisor_command, zk_hosts, state, tmp_path / "supervisor.log"
    ) as replica:
        config = json.dumps({"input": str(inbox), "output": str(out)})
        done = nimbus_cli(
            "submit", str(package), "--name", example, "--config-json", config,
            "--seeds", replica.address,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        expected = expect(_oracle(example), _lines(inbox))
        wait_until(lambda: produced(out) == expected, timeout=300, interval=1.0,
                   message=f"{example}'s output equal to its oracle's")  # fmt: skip


@pytest.mark.timeout(600)
def test_stateful_count_through_nimbus_survives_a_worker_sigkill(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path
) -> None:
    """The Python stateful bolt's counts, exact through a SIGKILL of its worker: the
    state of every word came back from the checkpoint, nothing counted twice."""
    oracle = _oracle("stateful-count")
    folder = EXAMPLES / "stateful-count"
    inbox, out, state = tmp_path / "input", tmp_path / "output", tmp_path / "supervisor"
    inbox.mkdir()
    first, second = sorted((folder / "corpus").iterdir())
    code = {"topology.py": (folder / "topology.py").read_bytes()}
    package = make_package(code, tmp_path / "count.zip")

    def counts() -> dict[str, int]:
        latest = latest_by_key(read_batches(out), "word")
        return {key[0]: row["count"] for key, row in latest.items()}

    with replica_and_supervisor(
        spawn, supervisor_command, zk_hosts, state, tmp_path / "supervisor.log"
    ) as replica:
        config = json.dumps({"input": str(inbox), "output": str(out)})
        done = nimbus_cli(
            "submit", str(package), "--name", "count", "--config-json", config,
            "--seeds", replica.address,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        add_input(inbox, first.name, first.read_text().splitlines())
        expected = oracle.counts(first.read_text().splitlines())
        wait_until(lambda: counts() == expected, timeout=300, interval=0.5,
                   message="the first file counted exactly")  # fmt: skip
        (pid_file,) = state.glob("workers/*/worker.pid")
        killed = int(pid_file.read_text().split()[0])
        add_input(inbox, second.name, second.read_text().splitlines())
        os.kill(killed, signal.SIGKILL)
        expected = oracle.counts(_lines(inbox))
        wait_until(lambda: counts() == expected, timeout=300, interval=1.0,
                   message="both files counted exactly after the SIGKILL")  # fmt: skip


def test_a_left_outer_join_emits_unmatched_rows_once_the_watermark_passes(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The single-join example as a left outer join: every gender row comes out, with the
    age of its match or, once no match can come any more, with none."""
    oracle = _oracle("single-join")
    corpus = EXAMPLES / "single-join" / "corpus"
    gender, age = _lines(corpus / "gender"), _lines(corpus / "age")
    out = _run_example(spark, tmp_path, "single-join", how="left")
    rows = [row for _, batch in read_batches(out) for row in batch]
    matched = sorted(
        (r["id"], r["gender"], _epoch(r["gender_ts"]), r["age"], _epoch(r["age_ts"]))
        for r in rows
        if r["age"] is not None
    )
    assert matched == oracle.joined(gender, age), "every match, once"
    unmatched = [r["id"] for r in rows if r["age"] is None]
    assert len(unmatched) == len(set(unmatched)), "an unmatched row comes out once"
    times = {int(line.split(" ")[1]): line.split(" ")[0] for line in gender}
    never = set(times) - {m[0] for m in matched}
    assert set(unmatched) <= never, "a row with a match never comes out alone"
    # Known unmatched once the watermark (newest time of the slower side less 10 s) has
    # passed the row's time plus 10 s; rows nearer the end may still wait for a match.
    newest = min(
        max(_epoch(line.split(" ")[0].rstrip("Z")) for line in side) for side in (gender, age)
    )
    settled = {i for i in never if _epoch(times[i].rstrip("Z")) + 10 < newest - 10 - 1}
    assert settled and settled <= set(unmatched)
