"""Stateful word count: Storm's ``StatefulWordCount`` as a topology package.

lines (files in a folder) -> split (SQL split into lower-cased words, shuffle grouping)
-> count (a Python ``StatefulBolt``: a count per word in a value state, fields grouping
on ``word``) -> out (one file per micro-batch).

``RunningCount`` does the same in the JVM; this one shows a bolt whose state is the user's
own Python code: ``CountWords.process`` reads the word's count, adds the new rows and
writes it back. The state lives in the checkpoint, so a restarted worker goes on counting.

Config (``nimbus submit ... --config-json``): ``input``, ``output`` (folders; defaults
``corpus/`` beside this file and ``./stateful-count-output``), ``parallelism`` (default 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.api import FileSink, FilesSpout, Split, Topology, TopologyBuilder
from pipeline.stateful import Processor, State, StatefulBolt

HERE = Path(__file__).resolve().parent
#: Words are lower-cased runs of letters, digits and apostrophes (a Java regex split).
WORD_SEPARATOR = r"[^a-z0-9']+"


class CountWords(Processor):
    """The running count of one word: its value state is the count so far."""

    state_schema = "count bigint"

    def process(
        self, key: tuple[Any, ...], rows: pd.DataFrame, state: State
    ) -> Iterator[dict[str, Any]]:
        count = (state.get() or 0) + len(rows)
        state.set(count)
        yield {"word": key[0], "count": count}


def build(config: dict[str, Any] | None = None) -> Topology:
    cfg = config or {}
    n = int(cfg.get("parallelism", 2))
    builder = TopologyBuilder()
    builder.set_spout("lines", FilesSpout(str(cfg.get("input", HERE / "corpus")), "line"))
    split = Split("line", "word", pattern=WORD_SEPARATOR, lower=True)
    builder.set_bolt("split", split, n).shuffle_grouping("lines")
    count = StatefulBolt(CountWords, keys=("word",), schema="word string, count bigint")
    builder.set_bolt("count", count, n).fields_grouping("split", "word")
    output = cfg.get("output", Path.cwd() / "stateful-count-output")
    builder.set_bolt("out", FileSink(str(output))).global_grouping("count")
    return builder.build()
