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

import importlib.util
import random
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import REPO
from _spark_baseline import (
    API,
    FILES,
    PARALLELISM,
    PLAIN,
    Comparison,
    Corpus,
    Measured,
    Sink,
    await_api,
    log_to,
    measure_corpus,
    run_plain_frame,
    vocabulary,
    write_files,
    zipf_cum_weights,
)
from _spark_baseline import main as baseline_main
from _spark_figures import print_head, print_summary, print_tail, standard_columns
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from pipeline.api import (
    CallbackSink,
    FilesSpout,
    Select,
    TopN,
    TopologyBuilder,
    Window,
)
from pipeline.runner import run as run_topology

FULL_ROWS = 2_000_000
QUICK_ROWS = 200_000
FULL_ROUNDS = 5
QUICK_ROUNDS = 5

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

RUN_COLUMNS = list(standard_columns("rows").values())  # every column, in its order
DESCRIPTIONS = {
    API: "pipeline.api topology, runner.run",
    PLAIN: "hand-written window/collect_list",
}

#: Window start (epoch seconds) -> [(word, count), ...], best first.
Rankings = dict[int, list[tuple[str, int]]]


log = log_to("windows")


# -------------------------------------------------------------------------------- corpus


def event_lines(rows: int, seed: int = SEED) -> list[str]:
    """``rows`` lines ``<ISO timestamp> <word>`` in time order, but for the jitter."""
    rng = random.Random(seed)
    vocab = vocabulary(rng, VOCABULARY, shortest=2)
    rng.shuffle(vocab)  # Zipf ranks independent of word length
    cum_weights = zipf_cum_weights(len(vocab), ZIPF_EXPONENT)
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

    Deterministic for a given seed; file ``n`` holds the ``n``-th stretch of time.
    """
    lines = event_lines(rows, seed)

    def texts() -> Iterator[str]:
        at = 0
        for index in range(files):
            count = rows // files + (1 if index < rows % files else 0)
            yield "\n".join(lines[at : at + count]) + "\n"
            at += count

    return write_files(folder, texts())


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
class Collector(Sink):
    """The sink both jobs share: each window's ranked rows.

    A batch's rows are ``(window, word, count[, rank])``; rows of one window arrive best
    first (the plain job's ``explode`` keeps the array's order; the api's ``rank`` is
    checked against that order).
    """

    rankings: dict[int, list[tuple[str, int]]] = field(default_factory=lambda: defaultdict(list))
    misranked: int = 0

    def take(self, rows: list[Row]) -> None:
        for row in rows:
            # Spark hands a timestamp over as a naive local datetime: .timestamp() undoes it.
            start = int(row[0].start.timestamp())
            top = self.rankings[start]
            top.append((row[1], row[2]))
            if len(row) > 3 and row[3] != len(top):
                self.misranked += 1


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
    return await_api(running, "top words")


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
    frame = plain_frame(spark, corpus)
    return run_plain_frame(frame, sink, checkpoint, mode="append", name="windows", what="top words")


def comparison(expected: Rankings, rows: int) -> Comparison[Collector]:
    def exact(job: str, round_no: int, sink: Collector, input_rows: int) -> bool:
        got = dict(sink.rankings)
        if got == expected and input_rows == rows and sink.misranked == 0:
            return True
        wrong = sum(1 for w in expected.keys() | got.keys() if expected.get(w) != got.get(w))
        log(
            f"{job} round {round_no}: {wrong} of {len(expected)} windows differ, "
            f"{sink.misranked} rows misranked, {input_rows} input rows of {rows}"
        )
        return False

    return Comparison(
        name="windows",
        unit="rows",
        jobs={API: run_api, PLAIN: run_plain},
        new_sink=Collector,
        exact=exact,
    )


# -------------------------------------------------------------------------------- report


def report(m: Measured[Rankings]) -> dict[str, Any]:
    mode = "quick" if m.quick else "full"
    f = print_head(
        m,
        f"rolling top words, API vs hand-written PySpark: {m.rows:,} event rows ({mode}), "
        f"{VOCABULARY:,}-word Zipf vocabulary, {len(m.expected):,} closed windows "
        f"({SIZE} every {SLIDE}, {LATENESS} lateness, top {TOP})",
        RUN_COLUMNS,
    )
    if f.cpu_p50 is None:
        raise RuntimeError("windows runs are measured for CPU time")
    cpu_ratio = f.cpu_p50[PLAIN] / f.cpu_p50[API]
    print_summary(f, DESCRIPTIONS, "rows")
    print(
        f"by CPU seconds (p50 plain CPU s / p50 api CPU s, rows per CPU second): {cpu_ratio:.3f}x"
    )
    common, load_after = print_tail(
        m, f, "both jobs = the example's Python oracle, closed windows, input rows = corpus rows"
    )
    return {
        **common,
        "rows": m.rows,
        "windows": len(m.expected),
        "vocabulary": VOCABULARY,
        "window": {"size": SIZE, "slide": SLIDE, "watermark": LATENESS, "top": TOP},
        "api_over_plain_cpu": round(cpu_ratio, 4),
        "api_cpu_s": [round(r.cpu_s or 0.0, 3) for r in f.timed[API]],
        "plain_cpu_s": [round(r.cpu_s or 0.0, 3) for r in f.timed[PLAIN]],
        "load_1min": [round(m.load_before, 2), round(load_after, 2)],
    }


CORPUS = Corpus(
    write=lambda folder, rows: write_corpus(folder, rows, FILES),
    reference=python_rankings,
    describe=lambda rankings: f"{len(rankings):,} closed windows",
)


def run(*, quick: bool, rounds: int | None) -> dict[str, Any]:
    rows = QUICK_ROWS if quick else FULL_ROWS
    rounds = rounds or (QUICK_ROUNDS if quick else FULL_ROUNDS)
    return report(
        measure_corpus(
            "windows", CORPUS, comparison, quick=quick, rows=rows, rounds=rounds, cpu=True
        )
    )


def main(argv: list[str] | None = None) -> int:
    quick_help = (
        f"{QUICK_ROWS:,} rows and {QUICK_ROUNDS} rounds instead of {FULL_ROWS:,} "
        f"and {FULL_ROUNDS} (a few minutes at most)"
    )
    return baseline_main(argv, __doc__, quick_help, run)


if __name__ == "__main__":
    sys.exit(main())
