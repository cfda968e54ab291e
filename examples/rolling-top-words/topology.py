"""Rolling top words: storm-starter's ``RollingTopWords`` as a topology package.

events (files of ``<ISO timestamp> <word>`` lines) -> parse (SQL: the event time and the
lower-cased word) -> counts (sliding window: 30 s long, every 10 s, per word, rows up to
5 s late still count) -> top (the 3 most frequent words of each window) -> out (files).

Storm needs a rolling counter, intermediate rankers and a total ranker with tick tuples;
here the window and the ranking are two steps Spark runs in the JVM, each window ranked
once, when the watermark passes its end.

Config (``nimbus submit ... --config-json``): ``input``, ``output`` (folders; defaults
``corpus/`` beside this file and ``./rolling-top-words-output``), ``n`` (default 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.api import FileSink, FilesSpout, Select, TopN, Topology, TopologyBuilder, Window

HERE = Path(__file__).resolve().parent
SIZE, SLIDE, LATENESS = "30 seconds", "10 seconds", "5 seconds"


def build(config: dict[str, Any] | None = None) -> Topology:
    cfg = config or {}
    builder = TopologyBuilder()
    builder.set_spout("events", FilesSpout(str(cfg.get("input", HERE / "corpus")), "line"))
    parse = Select(
        ts="to_timestamp(split(line, ' ')[0])",
        word="lower(split(line, ' ')[1])",
    )
    builder.set_bolt("parse", parse, 2).shuffle_grouping("events")
    window = Window(SIZE, SLIDE, on="ts", watermark=LATENESS, keys=("word",))
    builder.set_bolt("counts", window, 2).fields_grouping("parse", "word")
    builder.set_bolt("top", TopN(int(cfg.get("n", 3)), by="count")).global_grouping("counts")
    output = cfg.get("output", Path.cwd() / "rolling-top-words-output")
    builder.set_bolt("out", FileSink(str(output))).global_grouping("top")
    return builder.build()
