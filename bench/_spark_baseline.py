"""A pipeline.api job against the fastest hand-written Structured Streaming job, one session.

The frame bench/wordcount.py and bench/windows.py share: a corpus of ``FILES`` text files,
ONE SparkSession (``local[2]``), each job once untimed and then ``rounds`` times,
interleaved and alternating which goes first so drift hits both alike, every run with a
fresh checkpoint and checked against a plain-Python reference. What a bench brings: its
corpus, its two jobs, its sink and its check (a ``Comparison``), and the columns of its
tables (``_spark_figures``: the tables and JSON). Rates are corpus rows (lines) per
wall-clock second.
"""

from __future__ import annotations

import os
import random
import shutil
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, Generic, TypeVar

from _common import (
    bench_parser,
    cpu_seconds,
    load_1min,
    print_json,
)
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


E = TypeVar("E")


@dataclass(frozen=True)
class Corpus(Generic[E]):
    """A bench's corpus: ``write(folder, rows)`` writes it (returns its bytes);
    ``reference(folder)`` is the plain-Python answer over what was written and the rows it
    read; ``describe(answer)`` says what the answer holds, for the log."""

    write: Callable[[Path, int], int]
    reference: Callable[[Path], tuple[E, int]]
    describe: Callable[[E], str]


@dataclass(frozen=True)
class Measured(Generic[E]):
    """One run of a bench: its size, its corpus and the reference's answer, the session."""

    name: str
    quick: bool
    rows: int
    rounds: int
    corpus_bytes: int
    expected: E
    corpus_s: float  # writing the corpus and computing the reference
    session: Session
    began: float  # time.monotonic() at the start
    load_before: float


def measure_corpus(
    name: str,
    corpus: Corpus[E],
    comparison: Callable[[E, int], Comparison[Any]],
    *,
    quick: bool,
    rows: int,
    rounds: int,
    cpu: bool,
) -> Measured[E]:
    """Write the corpus into a fresh folder, check the reference read every row of it, and
    measure both jobs over it in one session (``measure_in_session``)."""
    began, load_before = time.monotonic(), load_1min()
    log = log_to(name)
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        work = Path(tmp)
        folder = work / "corpus"
        log(f"writing {rows:,} rows into {FILES} files under {folder}")
        t0 = time.monotonic()
        corpus_bytes = corpus.write(folder, rows)
        expected, counted = corpus.reference(folder)
        corpus_s = time.monotonic() - t0
        if counted != rows:
            raise RuntimeError(f"corpus has {counted} rows, expected {rows}")
        log(
            f"corpus: {corpus_bytes / 2**20:.1f} MiB, {corpus.describe(expected)} "
            f"({corpus_s:.1f} s); starting Spark"
        )
        bench = comparison(expected, rows)
        session = measure_in_session(bench, folder, work, rows, rounds, cpu=cpu)
    return Measured(
        name, quick, rows, rounds, corpus_bytes, expected, corpus_s, session, began, load_before
    )


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
