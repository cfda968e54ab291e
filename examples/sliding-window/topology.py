"""Sliding and tumbling windows: storm-starter's ``SlidingWindowTopology`` as a package.

events (files of ``<ISO timestamp> <integer>`` lines) -> parse (SQL) -> two windows over
the same stream: ``sliding`` (20 s long, every 10 s: count, sum, min, max) and
``tumbling`` (30 s: count and average), each written to its own folder. A window is
written once, when the watermark (newest event time less 5 s) passes its end.

Config: ``input``, ``output`` (folders; ``output/sliding`` and ``output/tumbling`` are
written), defaults ``corpus/`` beside this file and ``./sliding-window-output``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.api import FileSink, FilesSpout, Select, Topology, TopologyBuilder, Window

HERE = Path(__file__).resolve().parent
LATENESS = "5 seconds"


def build(config: dict[str, Any] | None = None) -> Topology:
    cfg = config or {}
    output = Path(cfg.get("output", Path.cwd() / "sliding-window-output"))
    builder = TopologyBuilder()
    builder.set_spout("events", FilesSpout(str(cfg.get("input", HERE / "corpus")), "line"))
    parse = Select(
        ts="to_timestamp(split(line, ' ')[0])",
        value="cast(split(line, ' ')[1] as bigint)",
    )
    builder.set_bolt("parse", parse, 2).shuffle_grouping("events")
    sliding = Window(
        "20 seconds",
        "10 seconds",
        on="ts",
        watermark=LATENESS,
        aggregates={
            "count": "count(*)",
            "sum": "sum(value)",
            "min": "min(value)",
            "max": "max(value)",
        },
    )
    builder.set_bolt("sliding", sliding).global_grouping("parse")
    tumbling = Window(
        "30 seconds",
        on="ts",
        watermark=LATENESS,
        aggregates={"count": "count(*)", "avg": "avg(value)"},
    )
    builder.set_bolt("tumbling", tumbling).global_grouping("parse")
    builder.set_bolt("sliding-out", FileSink(str(output / "sliding"))).global_grouping("sliding")
    builder.set_bolt("tumbling-out", FileSink(str(output / "tumbling"))).global_grouping("tumbling")
    return builder.build()
