"""The spout/bolt API's compilation to Structured Streaming, and runs (its validation, with no
Spark: tests/test_pipeline_validation.py).

The Spark tests share one session and small corpora, and run bounded queries
(``available_now``), so they stay around a minute here.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pytest
from pyspark.sql import DataFrame, SparkSession

from pipeline.api import (
    ArrowFilter,
    ArrowMap,
    CallbackSink,
    FileSink,
    FilesSpout,
    PythonSpout,
    RunningCount,
    Select,
    SentenceSource,
    Split,
    Topology,
    TopologyBuilder,
    TopologyError,
    Where,
)
from pipeline.compiler import compile_topology
from pipeline.errors import PipelineRunError
from pipeline.graph import ComponentSpec
from pipeline.package import load_topology
from pipeline.runner import run
from pipeline.sinks import latest_by_key, read_batches
from pipeline.spouts import SENTENCES

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "wordcount"
CORPUS = sorted((EXAMPLE / "corpus").glob("*.txt"))
WORD_SEP = re.compile(r"[^a-z0-9']+")
RUN_TIMEOUT = 120


def python_count(texts: Iterable[str]) -> Counter[str]:
    """The reference: a plain-Python word count with the example's word rule."""
    return Counter(
        w for text in texts for line in text.splitlines() for w in WORD_SEP.split(line.lower()) if w
    )


def corpus_copy(tmp_path: Path) -> tuple[Path, Path]:
    """The example's corpus copied into ``tmp_path/in``; that folder and ``tmp_path/out``."""
    inp = tmp_path / "in"
    inp.mkdir()
    for path in CORPUS:
        shutil.copy(path, inp)
    return inp, tmp_path / "out"


def sink_counts(folder: Path, key: str = "word", value: str = "count") -> Counter[str]:
    """Replay a FileSink folder of update-mode counts: the last count of each key wins."""
    latest = latest_by_key(read_batches(folder), key)
    return Counter({k[0]: row[value] for k, row in latest.items()})


def wordcount(inp: Path, out: Path, split: Any = None) -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout(inp))
    split = split or Split("line", "word", pattern=WORD_SEP.pattern, lower=True)
    builder.set_bolt("split", split, 2).shuffle_grouping("sentences")
    builder.set_bolt("count", RunningCount("word"), 2).fields_grouping("split", "word")
    builder.set_bolt("out", FileSink(out)).global_grouping("count")
    return builder


# --------------------------------------------------------------------------------- on Spark


def test_word_count_of_the_example_equals_a_python_count(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inp, out = corpus_copy(tmp_path)
    monkeypatch.setenv("WORDCOUNT_INPUT", str(inp))
    monkeypatch.setenv("WORDCOUNT_OUTPUT", str(out))
    topology = load_topology(EXAMPLE)
    with run(topology, spark, tmp_path / "checkpoint", name="wc") as running:
        assert running.await_termination(RUN_TIMEOUT)
    expected = python_count(p.read_text() for p in CORPUS)
    assert sum(expected.values()) > 300
    assert sink_counts(out) == expected


class RecordingFileSink(FileSink):
    """A FileSink that notes every batch id Spark hands it, published or skipped."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.calls: list[int] = []

    def write_batch(self, frame: DataFrame, batch_id: int) -> None:
        self.calls.append(batch_id)
        super().write_batch(frame, batch_id)


def test_restart_on_the_checkpoint_counts_new_input_once(
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    inp, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    inp.mkdir()
    shutil.copy(CORPUS[0], inp)

    first = RecordingFileSink(out)
    with run(_with_sink(wordcount(inp, out), first), spark, checkpoint) as running:
        assert running.await_termination(RUN_TIMEOUT)
    assert sink_counts(out) == python_count([CORPUS[0].read_text()])
    last = first.calls[-1]
    published = first.path_for(last)
    stamp = (published.stat().st_ino, published.stat().st_mtime_ns)

    # A crash after the sink published batch `last` but before Spark committed it:
    # Spark must replay that batch, and the sink must not publish it again.
    commits = checkpoint / "out" / "commits"
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    # New input arrives while the topology is down (written elsewhere, renamed in).
    shutil.copy(CORPUS[1], tmp_path / "staged.txt")
    os.replace(tmp_path / "staged.txt", inp / CORPUS[1].name)

    second = RecordingFileSink(out)
    with run(_with_sink(wordcount(inp, out), second), spark, checkpoint) as running:
        assert running.await_termination(RUN_TIMEOUT)
    assert second.calls[0] == last, "Spark did not replay the uncommitted batch"
    assert (published.stat().st_ino, published.stat().st_mtime_ns) == stamp
    ids = [batch_id for batch_id, _ in read_batches(out)]
    assert ids == sorted(set(ids)) and ids[-1] > last
    assert sink_counts(out) == python_count(p.read_text() for p in CORPUS)


def test_a_fresh_checkpoint_over_published_batches_is_refused_not_skipped(
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    """A slot moved to a supervisor without the checkpoint numbers other input as batch 0:
    the sink refuses it loudly (it used to skip it as already published: rows lost)."""
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    shutil.copy(CORPUS[0], inp)
    with run(wordcount(inp, out).build(), spark, tmp_path / "checkpoint-a") as running:
        assert running.await_termination(RUN_TIMEOUT)
    before = read_batches(out)
    shutil.copy(CORPUS[1], inp)
    with (
        pytest.raises(PipelineRunError, match=r"UnaccountedBatchError|not by this worker"),
        run(wordcount(inp, out).build(), spark, tmp_path / "checkpoint-b") as running,
    ):
        running.await_termination(RUN_TIMEOUT)
    assert read_batches(out) == before, "nothing published, nothing skipped"


def _with_sink(builder: TopologyBuilder, sink: FileSink) -> Topology:
    """The word count with ``sink`` in place of its plain file sink."""
    topology = builder.build()
    specs = tuple(
        ComponentSpec(s.name, sink, s.parallelism, s.inputs) if s.name == "out" else s
        for s in topology
    )
    return Topology(specs)


ARROW_PACKAGE = '''
"""A package whose bolt is a Python function: Spark's workers get it pickled by value."""
import os
import re

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.api import ArrowFlatMap, FileSink, FilesSpout, RunningCount, TopologyBuilder

SEP = r"[^a-z0-9']+"


def split_words(batch):
    lines = pc.utf8_lower(batch.column("line"))
    words = pc.list_flatten(pc.split_pattern_regex(lines, SEP))
    words = pc.filter(words, pc.not_equal(words, ""))
    return pa.RecordBatch.from_arrays([words.cast(pa.string())], names=["word"])


def build():
    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout(os.environ["ARROW_WC_INPUT"]))
    builder.set_bolt("split", ArrowFlatMap(split_words, "word string"), 2)\\
        .shuffle_grouping("sentences")
    builder.set_bolt("count", RunningCount("word"), 2).fields_grouping("split", "word")
    builder.set_bolt("out", FileSink(os.environ["ARROW_WC_OUTPUT"])).global_grouping("count")
    return builder.build()
'''


def test_a_python_arrow_flat_map_counts_like_the_sql_split(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inp, out = corpus_copy(tmp_path)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "topology.py").write_text(ARROW_PACKAGE)
    monkeypatch.setenv("ARROW_WC_INPUT", str(inp))
    monkeypatch.setenv("ARROW_WC_OUTPUT", str(out))
    with run(load_topology(package), spark, tmp_path / "checkpoint") as running:
        assert running.await_termination(RUN_TIMEOUT)
    assert sink_counts(out) == python_count(p.read_text() for p in CORPUS)


def test_python_spout_groupings_and_python_bolts(
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    """A Python data source spout under available_now, every grouping, SQL and Arrow bolts."""
    seen: dict[str, list[dict[str, Any]]] = {"copies": [], "short": []}

    def lengths(batch: Any) -> Any:  # a closure, so it reaches the workers by value
        return pc.utf8_length(batch.column("word")).cast("int32")

    def short(batch: Any) -> Any:
        return pc.less_equal(lengths(batch), 3)

    def collect(key: str) -> CallbackSink:
        return CallbackSink(lambda df, _: seen[key].extend(r.asDict() for r in df.collect()))

    builder = TopologyBuilder()
    builder.set_spout("s", PythonSpout(SentenceSource, options={"total": 50}), 2)
    builder.set_bolt("split", Split("sentence"), 2).local_grouping("s")
    # all grouping: each of the 3 tasks sees every row.
    builder.set_bolt("upper", Select(word="upper(word)"), 3).all_grouping("split")
    builder.set_bolt("copies", collect("copies")).none_grouping("upper")
    tag = ArrowMap(lambda b: b.append_column("n", lengths(b)), "word string, n int")
    builder.set_bolt("tag", tag, 2).shuffle_grouping("split")
    builder.set_bolt("short", ArrowFilter(short)).global_grouping("tag")
    builder.set_bolt("shortest", Where("n <= 2")).local_grouping("short")
    builder.set_bolt("out", collect("short")).global_grouping("shortest")
    with run(builder.build(), spark, tmp_path / "checkpoint") as running:
        assert running.await_termination(RUN_TIMEOUT)

    lines = [SENTENCES[i % len(SENTENCES)] for i in range(50)]
    words = Counter(w for line in lines for w in line.split())
    assert Counter(r["word"] for r in seen["copies"]) == Counter(
        {w.upper(): 3 * n for w, n in words.items()}
    )
    assert Counter((r["word"], r["n"]) for r in seen["short"]) == Counter(
        {(w, len(w)): n for w, n in words.items() if len(w) <= 2}
    )


def test_a_continuous_run_stops_between_micro_batches(
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    builder = TopologyBuilder()
    options = {"total": -1, "rowsPerSecond": 200}
    builder.set_spout("s", PythonSpout(SentenceSource, options=options))
    builder.set_bolt("split", Split("sentence")).local_grouping("s")
    builder.set_bolt("count", RunningCount("word")).fields_grouping("split", "word")
    builder.set_bolt("out", FileSink(out)).global_grouping("count")
    # 2 s between triggers: a stateful batch on a loaded 2-core box can take longer than
    # a shorter interval, and back-to-back batches leave no idle moment to stop in.
    running = run(
        builder.build(), spark, tmp_path / "checkpoint", trigger="continuous", interval=2.0
    )
    deadline = time.monotonic() + RUN_TIMEOUT
    while running.is_active and len(read_batches(out)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running.stop(timeout=30), "the query was still inside a micro-batch"
    assert not running.is_active
    assert len(read_batches(out)) >= 2
    assert sink_counts(out)["the"] > 0


def test_groupings_compile_to_the_partitioning_they_promise(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    builder = TopologyBuilder()
    builder.set_spout("s", FilesSpout(tmp_path))
    builder.set_bolt("split", Split("line"), 2).shuffle_grouping("s")  # fused: no exchange
    builder.set_bolt("py", ArrowFilter(lambda b: b.column(0)), 3).shuffle_grouping("split")
    builder.set_bolt("by_word", Where("true"), 4).fields_grouping("py", "word")
    builder.set_bolt("every", Where("true"), 5).all_grouping("by_word")
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).global_grouping("every")
    (query,) = compile_topology(builder.build(), spark)
    assert query.output_mode == "append" and query.state_partitions is None
    capsys.readouterr()
    query.frame.explain(mode="extended")
    plan = capsys.readouterr().out.split("== Optimized Logical Plan ==")[0]
    assert re.search(
        r"Repartition 1, true.*RepartitionByExpression \[__nimbus_all_task#\d+\], 5"
        r".*explode\(sequence\(0, 4.*RepartitionByExpression \[word#\d+\], 4"
        r".*MapInArrow.*Repartition 3, true.*explode\(split",
        plan,
        re.S,
    ), plan
    assert "Repartition 2" not in plan


def test_spark_refusing_an_expression_names_the_bolt(
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    builder = TopologyBuilder()
    builder.set_spout("s", FilesSpout(tmp_path))
    builder.set_bolt("keep", Where("no_such_column > 1")).local_grouping("s")
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).local_grouping("keep")
    with pytest.raises(TopologyError, match=r"'keep': Spark refused it"):
        run(builder.build(), spark, tmp_path / "checkpoint")
    assert not spark.streams.active


def test_build_gets_the_submitted_config_when_it_takes_one(tmp_path: Path) -> None:
    topology = load_topology(EXAMPLE, config={"parallelism": 5})
    assert topology["count"].parallelism == 5
    assert load_topology(EXAMPLE)["count"].parallelism == 2, "no config: the example's default"
    given = tmp_path / "given"
    given.mkdir()
    (given / "topology.py").write_text(
        "from pipeline.api import ConsoleSink, RateSpout, TopologyBuilder\n"
        "def build(config):\n"
        "    builder = TopologyBuilder()\n"
        "    builder.set_spout('ticks', RateSpout(1))\n"
        "    builder.set_bolt('print', ConsoleSink(), config['width']).shuffle_grouping('ticks')\n"
        "    return builder.build()\n"
    )
    assert load_topology(given, config={"width": 3})["print"].parallelism == 3
