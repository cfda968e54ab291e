"""What the windowed API costs on Spark: rolling top words against the fastest hand-written job.

Writes a fixed corpus of ``FULL_ROWS`` event lines (``--quick``: ``QUICK_ROWS``), each
``<ISO timestamp> <word>`` as in ``examples/rolling-top-words``: seeded, ``EVENTS_PER_S``
events a second on average over consecutive seconds (so about ``rows / EVENTS_PER_S / 10``
sliding windows), one in ten stamped up to ``JITTER_S`` seconds early (out of order within
a file), words drawn from a ``VOCABULARY``-word Zipf-weighted vocabulary, a few
capitalized. The lines go, in time order, into ``FILES`` text files. ONE SparkSession
(``pipeline.session.make_spark``, ``local[2]``) runs two jobs over it, each with
``trigger(availableNow=True)`` and a fresh checkpoint every run:

* api:   the topology of ``examples/rolling-top-words`` built with ``pipeline.api``:
  ``FilesSpout`` -> ``Select`` (the event time and the lower-cased word; shuffle grouping,
  parallelism 2) -> ``Window("30 seconds", "10 seconds", on="ts", watermark="5 seconds",
  keys=("word",))`` (fields grouping on word, parallelism 2) -> ``TopN(3, by="count")``
  (global grouping) -> a ``CallbackSink``, started with ``pipeline.runner.run``;
* plain: the fastest hand-written PySpark Structured Streaming job for the same rankings:
  ``readStream.text`` -> ``select(to_timestamp(split(value, ' ')[0]), lower(split(value,
  ' ')[1]))`` -> ``withWatermark`` -> ``groupBy(window(ts, 30 s, 10 s), word).count()`` ->
  ``groupBy(window).agg(slice(sort_array(collect_list(struct(count, word)), desc), 1, 3))``
  -> ``explode`` -> ``foreachBatch``, output mode ``append``.

Both sinks call the same function: it collects each micro-batch's rows to the driver and
files them by window. Every run's rankings are compared with the plain-Python oracle of
the example (``examples/rolling-top-words/oracle.py``, run on the corpus files): closed
windows only (end <= newest event time - 5 s), ties broken by (count, word) descending;
the run's input rows must also equal the corpus's.

Each job runs once untimed (warm-up), then ``rounds`` times, interleaved and alternating
which goes first, so drift (JIT, page cache, a noisy neighbour) affects both alike. A run
is timed on the wall clock from building the query to its termination; rows/s = corpus
rows / seconds. ``api_over_plain`` is the p50 rows/s of api over that of plain (the
target is at least ``TARGET_RATIO``). Each run's CPU seconds (Spark's JVM, which in
``local`` mode is driver and executors, plus this process) are reported too, with
``api_over_plain_cpu`` = p50 CPU s of plain over that of api: on a machine shared with
other CPU-heavy jobs the wall clock swings by 2x between identical runs, CPU time much less.

Both jobs spend most of their time in the window's state (RocksDB): every (window, word)
pair of the corpus is put into it in the first micro-batch and removed in the next,
when the watermark closes the windows.

Run from the repo root: ``python bench/windows.py [--quick] [--rounds N]``. Progress
goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import string
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import REPO, cpu_seconds, load_1min, machine_facts, percentile, print_table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from pipeline.api import (
    CallbackSink,
    FilesSpout,
    Select,
    TopN,
    TopologyBuilder,
    Window,
)
from pipeline.runner import run as run_topology
from pipeline.session import make_spark

FULL_ROWS = 2_000_000
QUICK_ROWS = 200_000
FULL_ROUNDS = 5
QUICK_ROUNDS = 5
FILES = 8
PARALLELISM = 2  # parse and window tasks, as in examples/rolling-top-words; shuffle partitions
MASTER = "local[2]"
TARGET_RATIO = 0.9

# The example's window: 30 s long, every 10 s, 5 s lateness, top 3 per window.
SIZE, SLIDE, LATENESS = "30 seconds", "10 seconds", "5 seconds"
TOP = 3

SEED = 20261124
VOCABULARY = 4_000
ZIPF_EXPONENT = 1.05
EVENTS_PER_S = (20, 80)  # events in one second: uniform in this range (mean 50)
JITTER_S = 3  # one event in ten is stamped 1..JITTER_S seconds before its second
START = datetime(2026, 1, 1, tzinfo=UTC)
ORACLE = REPO / "examples" / "rolling-top-words" / "oracle.py"

RUN_TIMEOUT_S = 900.0

API = "api"
PLAIN = "plain"
JOBS = (API, PLAIN)
DESCRIPTIONS = {
    API: "pipeline.api topology, runner.run",
    PLAIN: "hand-written window/collect_list",
}

#: Window start (epoch seconds) -> [(word, count), ...], best first.
Rankings = dict[int, list[tuple[str, int]]]


def log(message: str) -> None:
    print(f"[windows] {message}", file=sys.stderr, flush=True)


# -------------------------------------------------------------------------------- corpus


def vocabulary(rng: random.Random, size: int) -> list[str]:
    """``size`` distinct lower-case words of 2-12 letters."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        length = min(12, max(2, int(rng.gauss(6, 2.5))))
        word = "".join(rng.choices(string.ascii_lowercase, k=length))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def event_lines(rows: int, seed: int = SEED) -> list[str]:
    """``rows`` lines ``<ISO timestamp> <word>`` in time order, but for the jitter."""
    rng = random.Random(seed)
    vocab = vocabulary(rng, VOCABULARY)
    rng.shuffle(vocab)  # Zipf ranks independent of word length
    cum_weights = list(accumulate(1.0 / (rank**ZIPF_EXPONENT) for rank in range(1, len(vocab) + 1)))
    words = rng.choices(vocab, cum_weights=cum_weights, k=rows)
    stamps: list[str] = []
    second = 0
    while len(stamps) < rows:
        for _ in range(min(rng.randint(*EVENTS_PER_S), rows - len(stamps))):
            t = second
            if second >= JITTER_S and rng.random() < 0.1:
                t -= rng.randint(1, JITTER_S)
            stamps.append((START + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ"))
        second += 1
    lines: list[str] = []
    for stamp, word in zip(stamps, words, strict=True):
        if rng.random() < 0.05:
            word = word.capitalize()
        lines.append(f"{stamp} {word}")
    return lines


def write_corpus(folder: Path, rows: int, files: int, seed: int = SEED) -> int:
    """Write ``rows`` event lines over ``files`` files (``part-NN.txt``); returns bytes.

    Deterministic for a given seed; file ``n`` holds the ``n``-th stretch of time. Each
    file is written beside the folder and renamed into it, as the file spout expects.
    """
    lines = event_lines(rows, seed)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".{folder.name}.staging"
    staging.mkdir(exist_ok=True)
    total_bytes = 0
    at = 0
    for index in range(files):
        count = rows // files + (1 if index < rows % files else 0)
        data = ("\n".join(lines[at : at + count]) + "\n").encode("ascii")
        at += count
        name = f"part-{index:02d}.txt"
        (staging / name).write_bytes(data)
        os.replace(staging / name, folder / name)
        total_bytes += len(data)
    staging.rmdir()
    return total_bytes


def load_oracle() -> ModuleType:
    """``examples/rolling-top-words/oracle.py`` (its folder name is no package name)."""
    spec = importlib.util.spec_from_file_location("rolling_top_words_oracle", ORACLE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {ORACLE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, want in (("SIZE", 30), ("SLIDE", 10), ("LATENESS", 5)):
        if getattr(module, name) != want:
            raise RuntimeError(f"{ORACLE}: {name} is {getattr(module, name)}, expected {want}")
    return module


def python_rankings(folder: Path) -> tuple[Rankings, int]:
    """The reference: the example's oracle over every file's lines; and the line count."""
    lines: list[str] = []
    for path in sorted(folder.glob("*.txt")):
        lines.extend(path.read_text(encoding="ascii").splitlines())
    found: dict[int, list[tuple[str, int]]] = load_oracle().rankings(lines, TOP)
    return {int(start): [(str(w), int(c)) for w, c in top] for start, top in found.items()}, len(
        lines
    )


# ---------------------------------------------------------------------------------- jobs


@dataclass
class Collector:
    """The sink both jobs share: each window's ranked rows, collected to the driver.

    A batch's rows are ``(window, word, count[, rank])``; rows of one window arrive best
    first (the plain job's ``explode`` keeps the array's order; the api's ``rank`` is
    checked against that order).
    """

    rankings: dict[int, list[tuple[str, int]]] = field(default_factory=lambda: defaultdict(list))
    batches: int = 0
    rows: int = 0
    misranked: int = 0

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.collect()
        for row in rows:
            # Spark hands a timestamp over as a naive local datetime: .timestamp() undoes it.
            start = int(row[0].start.timestamp())
            top = self.rankings[start]
            top.append((row[1], row[2]))
            if len(row) > 3 and row[3] != len(top):
                self.misranked += 1
        self.batches += 1
        self.rows += len(rows)


@dataclass(frozen=True)
class RunResult:
    job: str
    round: int  # 0 is the warm-up
    seconds: float
    rows: int
    batches: int
    output_rows: int
    windows: int
    input_rows: int
    cpu_s: float
    """CPU seconds of Spark's JVM and of this process during the run (less noisy than
    the wall clock on a shared machine)."""
    trigger_ms: int
    """Summed ``triggerExecution`` of the query's progress reports: time inside batches."""
    exact: bool

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def _progress_totals(progress: list[dict[str, Any]]) -> tuple[int, int]:
    rows = sum(int(p.get("numInputRows", 0)) for p in progress)
    trigger = sum(int(p.get("durationMs", {}).get("triggerExecution", 0)) for p in progress)
    return rows, trigger


def run_api(spark: SparkSession, corpus: Path, checkpoint: Path, sink: Collector) -> list[Any]:
    """The rolling top words through the project's API; returns the progress reports."""
    builder = TopologyBuilder()
    builder.set_spout("events", FilesSpout(corpus, "line"))
    parse = Select(
        ts="to_timestamp(split(line, ' ')[0])",
        word="lower(split(line, ' ')[1])",
    )
    builder.set_bolt("parse", parse, PARALLELISM).shuffle_grouping("events")
    window = Window(SIZE, SLIDE, on="ts", watermark=LATENESS, keys=("word",))
    builder.set_bolt("counts", window, PARALLELISM).fields_grouping("parse", "word")
    builder.set_bolt("top", TopN(TOP, by="count")).global_grouping("counts")
    builder.set_bolt("out", CallbackSink(sink)).global_grouping("top")
    running = run_topology(builder.build(), spark, checkpoint, name="bench-windows")
    with running:
        if not running.await_termination(RUN_TIMEOUT_S):
            raise RuntimeError(f"api top words still running after {RUN_TIMEOUT_S:.0f} s")
    return [p for q in running.queries.values() for p in q.recentProgress]


def plain_frame(spark: SparkSession, corpus: Path) -> DataFrame:
    """The hand-written job's streaming frame: ``(window, word, count)``, best first."""
    parts = F.split(F.col("value"), " ")
    events = (
        spark.readStream.format("text")
        .load(str(corpus))
        .select(F.to_timestamp(parts[0]).alias("ts"), F.lower(parts[1]).alias("word"))
    )
    counts = (
        events.withWatermark("ts", LATENESS)
        .groupBy(F.window("ts", SIZE, SLIDE).alias("window"), "word")
        .count()
    )
    ranked = F.sort_array(F.collect_list(F.struct("count", "word")), asc=False)
    top = counts.groupBy("window").agg(F.slice(ranked, 1, TOP).alias("top"))
    return top.select("window", F.explode("top").alias("t")).select("window", "t.word", "t.count")


def run_plain(spark: SparkSession, corpus: Path, checkpoint: Path, sink: Collector) -> list[Any]:
    """The fastest hand-written Structured Streaming rolling top words we know of."""
    query: StreamingQuery = (
        plain_frame(spark, corpus)
        .writeStream.foreachBatch(sink)
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .queryName("bench-windows-plain")
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(int(RUN_TIMEOUT_S)):
            raise RuntimeError(f"plain top words still running after {RUN_TIMEOUT_S:.0f} s")
    finally:
        if query.isActive:
            query.stop()
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"plain top words failed: {failure}")
    return list(query.recentProgress)


Job = Callable[[SparkSession, Path, Path, Collector], list[Any]]
RUNNERS: dict[str, Job] = {API: run_api, PLAIN: run_plain}


def timed_run(
    job: str,
    round_no: int,
    spark: SparkSession,
    corpus: Path,
    work: Path,
    expected: Rankings,
    rows: int,
    cpu: Callable[[], float],
) -> RunResult:
    checkpoint = work / f"checkpoint-{job}-{round_no}"
    sink = Collector()
    cpu_began = cpu()
    began = time.perf_counter()
    progress = RUNNERS[job](spark, corpus, checkpoint, sink)
    seconds = time.perf_counter() - began
    cpu_s = cpu() - cpu_began
    shutil.rmtree(checkpoint, ignore_errors=True)
    input_rows, trigger_ms = _progress_totals(progress)
    got = dict(sink.rankings)
    exact = got == expected and input_rows == rows and sink.misranked == 0
    if not exact:
        wrong = sum(1 for w in expected.keys() | got.keys() if expected.get(w) != got.get(w))
        log(
            f"{job} round {round_no}: {wrong} of {len(expected)} windows differ, "
            f"{sink.misranked} rows misranked, {input_rows} input rows of {rows}"
        )
    result = RunResult(
        job=job,
        round=round_no,
        seconds=seconds,
        rows=rows,
        batches=sink.batches,
        output_rows=sink.rows,
        windows=len(got),
        input_rows=input_rows,
        cpu_s=cpu_s,
        trigger_ms=trigger_ms,
        exact=exact,
    )
    label = "warm-up" if round_no == 0 else f"round {round_no}"
    log(
        f"{label} {job}: {seconds:.2f} s, {result.rows_per_s:,.0f} rows/s, "
        f"{cpu_s:.2f} CPU s, exact={exact}"
    )
    return result


def measure(
    spark: SparkSession,
    corpus: Path,
    work: Path,
    expected: Rankings,
    rows: int,
    rounds: int,
    cpu: Callable[[], float],
) -> list[RunResult]:
    """Warm up each job once, then ``rounds`` interleaved rounds alternating the order."""
    results: list[RunResult] = []
    for job in JOBS:
        results.append(timed_run(job, 0, spark, corpus, work, expected, rows, cpu))
    for round_no in range(1, rounds + 1):
        order = JOBS if round_no % 2 else tuple(reversed(JOBS))
        for job in order:
            results.append(timed_run(job, round_no, spark, corpus, work, expected, rows, cpu))
    return results


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


def report(
    results: list[RunResult],
    *,
    rows: int,
    windows: int,
    corpus_bytes: int,
    rounds: int,
    quick: bool,
    spark_version: str,
    session_start_s: float,
    corpus_s: float,
    elapsed_s: float,
    load_before: float,
) -> dict[str, Any]:
    facts = machine_facts()
    mode = "quick" if quick else "full"
    print(
        f"rolling top words, API vs hand-written PySpark: {rows:,} event rows ({mode}), "
        f"{VOCABULARY:,}-word Zipf vocabulary, {windows:,} closed windows "
        f"({SIZE} every {SLIDE}, {LATENESS} lateness, top {TOP}), "
        f"{corpus_bytes / 2**20:.1f} MiB in {FILES} files; "
        f"Spark {spark_version} {MASTER}, {PARALLELISM} shuffle partitions, availableNow, "
        f"fresh checkpoint per run; 1 warm-up + {rounds} interleaved rounds per job"
    )
    print()
    run_rows: list[list[object]] = []
    for r in results:
        run_rows.append(
            [
                "warm-up" if r.round == 0 else str(r.round),
                r.job,
                r.seconds,
                f"{r.rows_per_s:,.0f}",
                f"{r.cpu_s:.1f}",
                r.batches,
                r.output_rows,
                f"{r.trigger_ms / 1000:.3f}",
                f"{r.seconds - r.trigger_ms / 1000:.3f}",
                "yes" if r.exact else "NO",
            ]
        )
    print_table(
        [
            "round",
            "job",
            "wall s",
            "rows/s",
            "CPU s",
            "batches",
            "out rows",
            "in batches s",
            "outside s",
            "exact",
        ],
        run_rows,
        align="llrrrrrrrl",
    )
    print()
    timed = {job: [r for r in results if r.job == job and r.round > 0] for job in JOBS}
    p50_s = {job: percentile([r.seconds for r in timed[job]], 50) for job in JOBS}
    rate = {job: percentile([r.rows_per_s for r in timed[job]], 50) for job in JOBS}
    ratio = rate[API] / rate[PLAIN]
    best = {job: max(r.rows_per_s for r in timed[job]) for job in JOBS}
    cpu_p50 = {job: percentile([r.cpu_s for r in timed[job]], 50) for job in JOBS}
    cpu_ratio = cpu_p50[PLAIN] / cpu_p50[API]
    paired = [
        a.rows_per_s / p.rows_per_s
        for a, p in zip(timed[API], timed[PLAIN], strict=True)
        if a.round == p.round
    ]
    summary_rows: list[list[object]] = []
    for job in JOBS:
        secs = [r.seconds for r in timed[job]]
        summary_rows.append(
            [
                job,
                DESCRIPTIONS[job],
                p50_s[job],
                min(secs),
                max(secs),
                f"{rate[job]:,.0f}",
                f"{rate[job] / rate[PLAIN]:.3f}x",
                f"{cpu_p50[job]:.1f}",
            ]
        )
    print_table(
        ["job", "what", "p50 s", "min s", "max s", "p50 rows/s", "over plain", "p50 CPU s"],
        summary_rows,
        align="llrrrrrr",
    )
    counts_exact = all(r.exact for r in results)
    load_after = load_1min()
    print()
    print(
        f"api / plain (p50 rows/s): {ratio:.3f}x (target >= {TARGET_RATIO}); best run "
        f"{best[API] / best[PLAIN]:.3f}x; per round {', '.join(f'{x:.3f}' for x in paired)}"
    )
    print(
        f"by CPU seconds (p50 plain CPU s / p50 api CPU s, rows per CPU second): {cpu_ratio:.3f}x"
    )
    print(
        f"rankings exact in every run (both jobs = the example's Python oracle, closed windows, "
        f"input rows = corpus rows): {'yes' if counts_exact else 'NO'}"
    )
    print(facts.line())
    print(
        f"SparkSession start {session_start_s:.1f} s; corpus written and ranked in Python "
        f"{corpus_s:.1f} s; wall time {elapsed_s:.1f} s; load (1 min) {load_before:.2f} "
        f"before, {load_after:.2f} after"
    )
    return {
        "benchmark": "windows",
        "quick": quick,
        "rows": rows,
        "windows": windows,
        "vocabulary": VOCABULARY,
        "corpus_bytes": corpus_bytes,
        "files": FILES,
        "rounds": rounds,
        "master": MASTER,
        "parallelism": PARALLELISM,
        "window": {"size": SIZE, "slide": SLIDE, "watermark": LATENESS, "top": TOP},
        "spark_version": spark_version,
        "api_rows_per_s": round(rate[API]),
        "plain_rows_per_s": round(rate[PLAIN]),
        "api_p50_s": round(p50_s[API], 4),
        "plain_p50_s": round(p50_s[PLAIN], 4),
        "api_seconds": [round(r.seconds, 4) for r in timed[API]],
        "plain_seconds": [round(r.seconds, 4) for r in timed[PLAIN]],
        "api_over_plain": round(ratio, 4),
        "api_over_plain_per_round": [round(x, 4) for x in paired],
        "api_over_plain_best": round(best[API] / best[PLAIN], 4),
        "api_over_plain_cpu": round(cpu_ratio, 4),
        "api_cpu_s": [round(r.cpu_s, 3) for r in timed[API]],
        "plain_cpu_s": [round(r.cpu_s, 3) for r in timed[PLAIN]],
        "target_ratio": TARGET_RATIO,
        "counts_exact": counts_exact,
        "session_start_s": round(session_start_s, 2),
        "wall_s": round(elapsed_s, 2),
        "load_1min": [round(load_before, 2), round(load_after, 2)],
        "machine": facts.as_dict(),
    }


def run(*, quick: bool, rounds: int | None) -> dict[str, Any]:
    began = time.monotonic()
    load_before = load_1min()
    rows = QUICK_ROWS if quick else FULL_ROWS
    rounds = rounds or (QUICK_ROUNDS if quick else FULL_ROUNDS)
    with tempfile.TemporaryDirectory(prefix="bench-windows-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        log(f"writing {rows:,} event rows into {FILES} files under {corpus}")
        t0 = time.monotonic()
        corpus_bytes = write_corpus(corpus, rows, FILES)
        expected, counted = python_rankings(corpus)
        corpus_s = time.monotonic() - t0
        if counted != rows:
            raise RuntimeError(f"corpus has {counted} rows, expected {rows}")
        log(
            f"corpus: {corpus_bytes / 2**20:.1f} MiB, {len(expected):,} closed windows "
            f"({corpus_s:.1f} s); starting Spark"
        )
        t0 = time.monotonic()
        spark = make_spark(
            MASTER,
            "bench-windows",
            shuffle_partitions=PARALLELISM,
            conf={"spark.local.dir": str(work / "spark-local")},
        )
        session_start_s = time.monotonic() - t0
        try:
            spark_version = spark.version
            results = measure(spark, corpus, work, expected, rows, rounds, process_cpu(spark))
        finally:
            spark.stop()
    return report(
        results,
        rows=rows,
        windows=len(expected),
        corpus_bytes=corpus_bytes,
        rounds=rounds,
        quick=quick,
        spark_version=spark_version,
        session_start_s=session_start_s,
        corpus_s=corpus_s,
        elapsed_s=time.monotonic() - began,
        load_before=load_before,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_ROWS:,} rows and {QUICK_ROUNDS} rounds instead of {FULL_ROWS:,} "
        f"and {FULL_ROUNDS} (a few minutes at most)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per job")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    result = run(quick=args.quick, rounds=args.rounds)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
