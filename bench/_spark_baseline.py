"""A pipeline.api job against the fastest hand-written Structured Streaming job, one session.

The frame bench/wordcount.py and bench/windows.py share: a corpus of ``FILES`` text files,
ONE SparkSession (``local[2]``), each job once untimed and then ``rounds`` times,
interleaved and alternating which goes first so drift hits both alike, every run with a
fresh checkpoint and checked against a plain-Python reference. What a bench brings: its
corpus, its two jobs, its sink and its check (a ``Comparison``), and the columns of its
tables. Rates are corpus rows (lines) per wall-clock second.
"""

from __future__ import annotations

import os
import random
import shutil
import string
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, Generic, TypeVar

from _common import bench_parser, cpu_seconds, percentile, print_json, print_table
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from pipeline.runner import TopologyRun
from pipeline.session import make_spark

API = "api"
PLAIN = "plain"
JOBS = (API, PLAIN)
FILES = 8
PARALLELISM = 2  # the example's bolt parallelism; also the shuffle partitions
MASTER = "local[2]"
TARGET_RATIO = 0.9
RUN_TIMEOUT_S = 900.0


def log_to(name: str) -> Callable[[str], None]:
    def log(message: str) -> None:
        print(f"[{name}] {message}", file=sys.stderr, flush=True)

    return log


# -------------------------------------------------------------------------------- corpus


def vocabulary(
    rng: random.Random, size: int, *, shortest: int, apostrophes: float = 0.0
) -> list[str]:
    """``size`` distinct lower-case words of ``shortest`` to 12 letters; of those longer than
    3 letters, a share ``apostrophes`` has an apostrophe inside."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        length = min(12, max(shortest, int(rng.gauss(6, 2.5))))
        word = "".join(rng.choices(string.ascii_lowercase, k=length))
        if apostrophes and length > 3 and rng.random() < apostrophes:
            cut = rng.randrange(1, length)
            word = f"{word[:cut]}'{word[cut:]}"
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf_cum_weights(size: int, exponent: float) -> list[float]:
    """Cumulative weights of ranks 1..size under Zipf's law, for ``random.choices``."""
    return list(accumulate(1.0 / (rank**exponent) for rank in range(1, size + 1)))


def write_files(folder: Path, texts: Iterable[str]) -> int:
    """Each text into ``part-NN.txt``, written beside the folder and renamed into it (as the
    file spout expects); returns the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".{folder.name}.staging"
    staging.mkdir(exist_ok=True)
    total_bytes = 0
    for index, text in enumerate(texts):
        data = text.encode("ascii")
        name = f"part-{index:02d}.txt"
        (staging / name).write_bytes(data)
        os.replace(staging / name, folder / name)
        total_bytes += len(data)
    staging.rmdir()
    return total_bytes


# ---------------------------------------------------------------------------------- jobs


@dataclass
class Sink:
    """What both jobs of a bench write to: each micro-batch collected to the driver, counted
    and handed to the bench's ``take``."""

    batches: int = 0
    rows: int = 0

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.collect()
        self.take(rows)
        self.batches += 1
        self.rows += len(rows)

    def take(self, rows: list[Row]) -> None:
        raise NotImplementedError


S = TypeVar("S", bound=Sink)
Job = Callable[[SparkSession, Path, Path, S], list[Any]]


def await_api(running: TopologyRun, what: str) -> list[Any]:
    """Wait for the topology's queries to finish; their progress reports."""
    with running:
        if not running.await_termination(RUN_TIMEOUT_S):
            raise RuntimeError(f"api {what} still running after {RUN_TIMEOUT_S:.0f} s")
    return [p for q in running.queries.values() for p in q.recentProgress]


def run_plain_frame(
    frame: DataFrame, sink: Sink, checkpoint: Path, *, mode: str, name: str, what: str
) -> list[Any]:
    """Run the hand-written streaming frame into ``sink`` (output mode ``mode``, available
    input only) until it finishes; its progress reports."""
    query: StreamingQuery = (
        frame.writeStream.foreachBatch(sink)
        .outputMode(mode)
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"bench-{name}-plain")
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(int(RUN_TIMEOUT_S)):
            raise RuntimeError(f"plain {what} still running after {RUN_TIMEOUT_S:.0f} s")
    finally:
        if query.isActive:
            query.stop()
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"plain {what} failed: {failure}")
    return list(query.recentProgress)


@dataclass(frozen=True)
class Comparison(Generic[S]):
    """One bench's two jobs, a fresh sink per run and the check of a run's output."""

    name: str  # the log prefix and the Spark app's name, ``bench-<name>``
    unit: str  # what a corpus row is: "lines", "rows"
    jobs: Mapping[str, Job[S]]
    new_sink: Callable[[], S]
    exact: Callable[[str, int, S, int], bool]  # (job, round, sink, input rows); logs what differs


@dataclass(frozen=True)
class RunResult:
    job: str
    round: int  # 0 is the warm-up
    seconds: float
    rows: int  # corpus rows (lines)
    batches: int
    output_rows: int
    input_rows: int
    trigger_ms: int
    """Summed ``triggerExecution`` of the query's progress reports: time inside batches."""
    exact: bool
    cpu_s: float | None = None
    """CPU seconds of Spark's JVM and of this process during the run, where measured."""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def progress_totals(progress: list[dict[str, Any]]) -> tuple[int, int]:
    rows = sum(int(p.get("numInputRows", 0)) for p in progress)
    trigger = sum(int(p.get("durationMs", {}).get("triggerExecution", 0)) for p in progress)
    return rows, trigger


def timed_run(
    bench: Comparison[S],
    job: str,
    round_no: int,
    spark: SparkSession,
    corpus: Path,
    work: Path,
    rows: int,
    cpu: Callable[[], float] | None,
) -> RunResult:
    checkpoint = work / f"checkpoint-{job}-{round_no}"
    sink = bench.new_sink()
    cpu_began = cpu() if cpu is not None else 0.0
    began = time.perf_counter()
    progress = bench.jobs[job](spark, corpus, checkpoint, sink)
    seconds = time.perf_counter() - began
    cpu_s = cpu() - cpu_began if cpu is not None else None
    shutil.rmtree(checkpoint, ignore_errors=True)
    input_rows, trigger_ms = progress_totals(progress)
    exact = bench.exact(job, round_no, sink, input_rows)
    result = RunResult(
        job=job,
        round=round_no,
        seconds=seconds,
        rows=rows,
        batches=sink.batches,
        output_rows=sink.rows,
        input_rows=input_rows,
        trigger_ms=trigger_ms,
        exact=exact,
        cpu_s=cpu_s,
    )
    label = "warm-up" if round_no == 0 else f"round {round_no}"
    cpu_part = f"{cpu_s:.2f} CPU s, " if cpu_s is not None else ""
    log_to(bench.name)(
        f"{label} {job}: {seconds:.2f} s, {result.rows_per_s:,.0f} {bench.unit}/s, "
        f"{cpu_part}exact={exact}"
    )
    return result


def measure(
    bench: Comparison[S],
    spark: SparkSession,
    corpus: Path,
    work: Path,
    rows: int,
    rounds: int,
    cpu: Callable[[], float] | None = None,
) -> list[RunResult]:
    """Warm up each job once, then ``rounds`` interleaved rounds alternating the order."""
    results = [timed_run(bench, job, 0, spark, corpus, work, rows, cpu) for job in JOBS]
    for round_no in range(1, rounds + 1):
        order = JOBS if round_no % 2 else tuple(reversed(JOBS))
        for job in order:
            results.append(timed_run(bench, job, round_no, spark, corpus, work, rows, cpu))
    return results


def start_spark(name: str, work: Path) -> tuple[SparkSession, float]:
    """The one session both jobs run in, and the seconds it took to start."""
    t0 = time.monotonic()
    spark = make_spark(
        MASTER,
        f"bench-{name}",
        shuffle_partitions=PARALLELISM,
        conf={"spark.local.dir": str(work / "spark-local")},
    )
    return spark, time.monotonic() - t0


@dataclass(frozen=True)
class Session:
    """What one session's runs gave: the results, Spark's version, the session's start time."""

    results: list[RunResult]
    spark_version: str
    start_s: float


def measure_in_session(
    bench: Comparison[S], corpus: Path, work: Path, rows: int, rounds: int, *, cpu: bool
) -> Session:
    """Start the session, ``measure`` both jobs in it (with CPU time if ``cpu``), stop it."""
    spark, start_s = start_spark(bench.name, work)
    try:
        results = measure(
            bench, spark, corpus, work, rows, rounds, process_cpu(spark) if cpu else None
        )
        return Session(results, spark.version, start_s)
    finally:
        spark.stop()


def process_cpu(spark: SparkSession) -> Callable[[], float]:
    """CPU seconds used so far by Spark's JVM (``local[2]``: driver and executors) and by
    this Python process (the sinks' collect and bookkeeping)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the SparkSession has no JVM gateway")
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())

    def used() -> float:
        jvm_s = cpu_seconds(jvm_pid)
        if jvm_s is None:
            raise RuntimeError(f"cannot read the CPU time of Spark's JVM (pid {jvm_pid})")
        return jvm_s + time.process_time()

    return used


# -------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Column:
    """A column of the per-run table: header, alignment (``l``/``r``), the cell of a run."""

    header: str
    align: str
    cell: Callable[[RunResult], object]


def standard_columns(unit: str) -> dict[str, Column]:
    return {
        c.header: c
        for c in (
            Column("round", "l", lambda r: "warm-up" if r.round == 0 else str(r.round)),
            Column("job", "l", lambda r: r.job),
            Column("wall s", "r", lambda r: r.seconds),
            Column(f"{unit}/s", "r", lambda r: f"{r.rows_per_s:,.0f}"),
            Column("CPU s", "r", lambda r: f"{r.cpu_s or 0.0:.1f}"),
            Column("batches", "r", lambda r: r.batches),
            Column("out rows", "r", lambda r: r.output_rows),
            Column("in batches s", "r", lambda r: f"{r.trigger_ms / 1000:.3f}"),
            Column("outside s", "r", lambda r: f"{r.seconds - r.trigger_ms / 1000:.3f}"),
            Column("exact", "l", lambda r: "yes" if r.exact else "NO"),
        )
    }


def print_runs(results: Sequence[RunResult], columns: Sequence[Column]) -> None:
    print_table(
        [c.header for c in columns],
        [[c.cell(r) for c in columns] for r in results],
        align="".join(c.align for c in columns),
    )


@dataclass(frozen=True)
class Figures:
    """The timed rounds of both jobs, reduced: api against plain."""

    timed: dict[str, list[RunResult]]
    p50_s: dict[str, float]
    rate: dict[str, float]  # p50 rows per second
    best: dict[str, float]  # the best run's rows per second
    paired: list[float]  # api over plain, round by round
    exact: bool  # every run, warm-ups included
    cpu_p50: dict[str, float] | None  # where the runs were measured for CPU

    @property
    def ratio(self) -> float:
        return self.rate[API] / self.rate[PLAIN]

    @property
    def best_ratio(self) -> float:
        return self.best[API] / self.best[PLAIN]


def figures(results: Sequence[RunResult]) -> Figures:
    timed = {job: [r for r in results if r.job == job and r.round > 0] for job in JOBS}
    cpu = [r.cpu_s for r in results]
    return Figures(
        timed=timed,
        p50_s={job: percentile([r.seconds for r in timed[job]], 50) for job in JOBS},
        rate={job: percentile([r.rows_per_s for r in timed[job]], 50) for job in JOBS},
        best={job: max(r.rows_per_s for r in timed[job]) for job in JOBS},
        paired=[
            a.rows_per_s / p.rows_per_s
            for a, p in zip(timed[API], timed[PLAIN], strict=True)
            if a.round == p.round
        ],
        exact=all(r.exact for r in results),
        cpu_p50=None
        if None in cpu
        else {job: percentile([r.cpu_s or 0.0 for r in timed[job]], 50) for job in JOBS},
    )


def print_summary(f: Figures, descriptions: Mapping[str, str], unit: str) -> None:
    """The per-job summary table (with p50 CPU where measured) and the api/plain line."""
    rows: list[list[object]] = []
    for job in JOBS:
        secs = [r.seconds for r in f.timed[job]]
        row: list[object] = [
            job,
            descriptions[job],
            f.p50_s[job],
            min(secs),
            max(secs),
            f"{f.rate[job]:,.0f}",
            f"{f.rate[job] / f.rate[PLAIN]:.3f}x",
        ]
        if f.cpu_p50 is not None:
            row.append(f"{f.cpu_p50[job]:.1f}")
        rows.append(row)
    headers = ["job", "what", "p50 s", "min s", "max s", f"p50 {unit}/s", "over plain"]
    if f.cpu_p50 is not None:
        headers.append("p50 CPU s")
    print_table(headers, rows, align="ll" + "r" * (len(headers) - 2))
    print()
    print(
        f"api / plain (p50 {unit}/s): {f.ratio:.3f}x (target >= {TARGET_RATIO}); best run "
        f"{f.best_ratio:.3f}x; per round {', '.join(f'{x:.3f}' for x in f.paired)}"
    )


def figures_json(f: Figures) -> dict[str, Any]:
    """The JSON keys both benches report of the comparison."""
    return {
        "api_rows_per_s": round(f.rate[API]),
        "plain_rows_per_s": round(f.rate[PLAIN]),
        "api_p50_s": round(f.p50_s[API], 4),
        "plain_p50_s": round(f.p50_s[PLAIN], 4),
        "api_seconds": [round(r.seconds, 4) for r in f.timed[API]],
        "plain_seconds": [round(r.seconds, 4) for r in f.timed[PLAIN]],
        "api_over_plain": round(f.ratio, 4),
        "api_over_plain_per_round": [round(x, 4) for x in f.paired],
        "api_over_plain_best": round(f.best_ratio, 4),
        "target_ratio": TARGET_RATIO,
        "counts_exact": f.exact,
        "files": FILES,
        "master": MASTER,
        "parallelism": PARALLELISM,
    }


def main(
    argv: list[str] | None,
    doc: str | None,
    quick_help: str,
    run: Callable[..., dict[str, Any]],
) -> int:
    """``--quick`` and ``--rounds N``; the result as one JSON line, last on stdout."""
    parser = bench_parser(doc, quick_help)
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per job")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    print_json(run(quick=args.quick, rounds=args.rounds))
    return 0
