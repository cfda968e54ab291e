"""A Python stateful bolt (``pipeline.stateful``): counts equal the oracle's, state survives
a restart and a repartition, a failing key is skipped with its state untouched, and
mistakes are refused at validation naming the component.

The Spark tests share the session fixture and run bounded queries (``available_now``).
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from pipeline.api import FileSink, FilesSpout, Split, Topology, TopologyBuilder, TopologyError
from pipeline.components import OnError
from pipeline.errors import PipelineRunError
from pipeline.package import load_topology
from pipeline.progress import Progress
from pipeline.runner import TopologyRun, run
from pipeline.sinks import latest_by_key, read_batches
from pipeline.stateful import Processor, State, StatefulBolt

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "stateful-count"
CORPUS = sorted((EXAMPLE / "corpus").glob("*.txt"))
RUN_TIMEOUT = 180


def _oracle() -> ModuleType:
    spec = importlib.util.spec_from_file_location("oracle_stateful_count", EXAMPLE / "oracle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(folder: Path) -> list[str]:
    return [line for p in sorted(folder.iterdir()) for line in p.read_text().splitlines()]


def _counts(out: Path) -> dict[str, int]:
    """The sink's ``update`` rows replayed: each word's latest count."""
    latest = latest_by_key(read_batches(out), "word")
    return {word: row["count"] for (word,), row in latest.items()}


def _run_to_end(topology: Topology, spark: SparkSession, checkpoint: Path) -> TopologyRun:
    with run(topology, spark, checkpoint, name="stateful-count") as running:
        assert running.await_termination(timeout=RUN_TIMEOUT)
    return running


def test_stateful_count_equals_its_oracle(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out = tmp_path / "in", tmp_path / "out"
    shutil.copytree(EXAMPLE / "corpus", inbox)
    topology = load_topology(EXAMPLE, config={"input": str(inbox), "output": str(out)})
    _run_to_end(topology, spark, tmp_path / "checkpoint")
    expected = _oracle().counts(_lines(inbox))
    assert expected["word"] == 5, "a word has several rows in one batch"
    assert _counts(out) == expected


def test_counts_continue_after_a_restart_with_more_partitions(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The second run reads only the new file, emits only its words, and their counts
    go on from the first run's: the state came from the checkpoint, now in 3 partitions."""
    oracle = _oracle()
    inbox, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    inbox.mkdir()
    first, second = CORPUS
    shutil.copy(first, inbox)
    config = {"input": str(inbox), "output": str(out)}
    _run_to_end(load_topology(EXAMPLE, config=config), spark, checkpoint)
    assert _counts(out) == oracle.counts(first.read_text().splitlines())
    published = {batch for batch, _ in read_batches(out)}

    shutil.copy(second, inbox)
    wider = load_topology(EXAMPLE, config={**config, "parallelism": 3})
    running = _run_to_end(wider, spark, checkpoint)
    assert running.state_partitions == {"count": 3}, running.notes
    assert _counts(out) == oracle.counts(_lines(inbox))
    new_rows = [r for b, rows in read_batches(out) if b not in published for r in rows]
    assert {r["word"] for r in new_rows} == set(oracle.counts(second.read_text().splitlines()))


def test_a_failing_key_is_skipped_with_its_state_untouched(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``process`` writes the state, then raises past a limit: with ``OnError.SKIP`` the
    key's rows of that batch are counted as skipped and the write is discarded, so the
    next batch counts from the old value. With ``OnError.FAIL`` the query fails naming
    the bolt. The processor is a plain function (a closure, so it reaches the workers),
    its state two columns (a dict), one a timestamp."""
    limit, start = 2, datetime(2026, 1, 1, tzinfo=UTC)

    def count_to_limit(key: tuple[Any, ...], rows: pd.DataFrame, state: State) -> Any:
        old = state.get() or {"count": 0, "since": start}
        count = old["count"] + len(rows)
        state.set({"count": count, "since": old["since"]})
        if count > limit:
            raise ValueError(f"{key[0]!r} passed {limit}")
        return {"word": key[0], "count": count}

    def topology(inbox: Path, out: Path, on_error: OnError) -> Topology:
        bolt = StatefulBolt(
            count_to_limit,
            keys="word",
            schema="word string, count bigint",
            state="count bigint, since timestamp",
            on_error=on_error,
        )
        builder = TopologyBuilder()
        builder.set_spout("lines", FilesSpout(str(inbox), "line"))
        builder.set_bolt("split", Split("line", "word")).shuffle_grouping("lines")
        builder.set_bolt("count", bolt, 2).fields_grouping("split", "word")
        builder.set_bolt("out", FileSink(str(out))).global_grouping("count")
        return builder.build()

    inbox, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    inbox.mkdir()
    (inbox / "1.txt").write_text("a a a b\n")
    skipping = topology(inbox, out, OnError.SKIP)
    with run(skipping, spark, checkpoint, name="skip") as running:
        assert running.await_termination(timeout=RUN_TIMEOUT)
        progress = Progress()
        progress.update(running, now=0.0)
    (count,) = (c for c in progress.components({"count": 2}) if c.component == "count")
    assert (count.rows, count.skipped_rows) == (1, 3)
    assert _counts(out) == {"b": 1}

    (inbox / "2.txt").write_text("a a b\n")
    _run_to_end(skipping, spark, checkpoint)
    assert _counts(out) == {"a": 2, "b": 2}, "a's discarded write of 3 would make it 5"

    (inbox / "3.txt").write_text("b\n")
    failing = topology(inbox, tmp_path / "failed-out", OnError.FAIL)
    with pytest.raises(PipelineRunError, match=r"bolt 'count': ValueError: 'b' passed 2"):
        _run_to_end(failing, spark, checkpoint)


# ------------------------------------------------------------------ validation, no Spark


class CountWords(Processor):
    state_schema = "count bigint"

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: State) -> Iterator[Any]:
        yield key[0], len(rows)


class NoProcess(Processor):
    state_schema = "count bigint"


class TwoArguments(Processor):
    state_schema = "count bigint"

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame) -> None:  # type: ignore[override]
        return None


class NoStateSchema(Processor):
    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: State) -> None:
        return None


def _topology(bolt: StatefulBolt, group: Callable[[Any], Any] | None = None) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("lines", FilesSpout("unused-input", "line"))
    builder.set_bolt("split", Split("line", "word")).shuffle_grouping("lines")
    declarer = builder.set_bolt("count", bolt, 2)
    (group or (lambda d: d.fields_grouping("split", "word")))(declarer)
    builder.set_bolt("out", FileSink("unused-output")).global_grouping("count")
    return builder.build()


def _bolt(processor: Any = CountWords, **kw: Any) -> StatefulBolt:
    args: dict[str, Any] = {"keys": ("word",), "schema": "word string, count bigint", **kw}
    return StatefulBolt(processor, **args)


@pytest.mark.parametrize(
    ("bolt", "problem"),
    [
        pytest.param(
            _bolt(keys=("wrd",)),
            r"key uses undeclared field 'wrd' \(did you mean 'word'\?\); its input declares",
            id="unknown-key",
        ),
        pytest.param(_bolt(keys=()), r"needs at least one key field", id="no-key"),
        pytest.param(
            _bolt(NoProcess),
            r"NoProcess has no process\(key, rows, state\) method",
            id="no-process",
        ),
        pytest.param(
            _bolt(TwoArguments),
            r"TwoArguments's process must take \(key, rows, state\)",
            id="process-signature",
        ),
        pytest.param(
            _bolt(lambda key, rows: None, state="n bigint"),
            r"<lambda>'s process must take \(key, rows, state\)",
            id="function-signature",
        ),
        pytest.param(
            _bolt(NoStateSchema), r"NoStateSchema declares no state_schema", id="no-state-schema"
        ),
        pytest.param(
            _bolt(lambda k, r, s: None),
            r"declares no state_schema .*or pass state=",
            id="function-without-state",
        ),
        pytest.param(
            _bolt(schema="word string, , count bigint"),
            r"StatefulBolt schema: schema .* has an empty column",
            id="empty-column",
        ),
        pytest.param(
            _bolt(schema="word string, word bigint"),
            r"field 'word' is declared twice",
            id="duplicate-column",
        ),
        pytest.param(
            _bolt(state="`count bigint"),
            r"StatefulBolt state schema: .* has an unclosed backtick",
            id="bad-state-schema",
        ),
        pytest.param(
            _bolt(schema=["word string"]), r"schema must be a DDL string", id="schema-not-ddl"
        ),
        pytest.param(_bolt(on_error="skip"), r"on_error must be an OnError", id="on-error"),
        pytest.param(
            _bolt(object()),
            r"needs a Processor subclass, an instance of one, or a func",
            id="not-a-processor",
        ),
    ],
)
def test_validation_refuses_mistakes_naming_the_component(bolt: StatefulBolt, problem: str) -> None:
    with pytest.raises(TopologyError, match=problem) as caught:
        _topology(bolt)
    assert caught.value.component == "count"


def test_a_grouping_that_splits_a_key_is_refused() -> None:
    with pytest.raises(TopologyError, match=r"'count': a stateful bolt needs a fields grouping"):
        _topology(_bolt(), lambda d: d.shuffle_grouping("split"))


def test_a_good_bolt_passes_validation_with_its_declared_fields() -> None:
    topology = _topology(_bolt(keys="word"))
    out = topology["count"].component
    assert isinstance(out, StatefulBolt)
    assert out.output_fields(("word",)) == ("word", "count")
    assert out.key_fields() == ("word",)
