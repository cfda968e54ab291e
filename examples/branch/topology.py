"""One stream split into named streams: storm-starter's ``streams/BranchExample``.

numbers (files of integers, one per line) -> parse (SQL cast) -> branch (streams
``even`` and ``odd`` by predicate) -> even-out and odd-out, each subscribed to one
stream and writing its own folder (``output/even``, ``output/odd``).

Config: ``input``, ``output``; defaults ``corpus/`` beside this file and ``./branch-output``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.api import Branch, FileSink, FilesSpout, Select, Topology, TopologyBuilder

HERE = Path(__file__).resolve().parent


def build(config: dict[str, Any] | None = None) -> Topology:
    cfg = config or {}
    output = Path(cfg.get("output", Path.cwd() / "branch-output"))
    builder = TopologyBuilder()
    builder.set_spout("numbers", FilesSpout(str(cfg.get("input", HERE / "corpus")), "line"))
    builder.set_bolt("parse", Select(n="cast(line as bigint)")).shuffle_grouping("numbers")
    branch = Branch({"even": "n % 2 = 0", "odd": "n % 2 != 0"})
    builder.set_bolt("branch", branch).shuffle_grouping("parse")
    builder.set_bolt("even-out", FileSink(str(output / "even"))).global_grouping(
        "branch", stream="even"
    )
    builder.set_bolt("odd-out", FileSink(str(output / "odd"))).global_grouping(
        "branch", stream="odd"
    )
    return builder.build()
