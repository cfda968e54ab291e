"""Word count: Storm's classic example as a topology package.

sentences (files in a folder) -> split (SQL split, shuffle grouping)
-> count (running count per word, fields grouping on ``word``) -> out (one file per batch).

Configuration, first found wins per key:
1. the topology config submitted with it: ``nimbus submit ... --config-json
   '{"parallelism": 4}'`` (Nimbus calls ``build(config)``; same keys as ``config.json``);
2. environment: ``WORDCOUNT_INPUT``, ``WORDCOUNT_OUTPUT``, ``WORDCOUNT_PARALLELISM``;
3. ``config.json`` beside this file: ``{"input": ..., "output": ..., "parallelism": 2}``;
4. defaults: input ``corpus/`` beside this file, output ``wordcount-output`` in the
   working directory, parallelism 2.
Relative paths in ``config.json`` or the submitted config are relative to this folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.api import FileSink, FilesSpout, RunningCount, Split, Topology, TopologyBuilder

HERE = Path(__file__).resolve().parent
#: Words are lower-cased runs of letters, digits and apostrophes (a Java regex split).
WORD_SEPARATOR = r"[^a-z0-9']+"


def config(submitted: dict[str, Any] | None = None) -> dict[str, Any]:
    """The effective settings (see the module docstring)."""
    given = submitted or {}
    file_cfg: dict[str, Any] = {}
    cfg_path = HERE / "config.json"
    if cfg_path.is_file():
        file_cfg = json.loads(cfg_path.read_text())

    def path(key: str, env: str, default: Path) -> str:
        if key in given:
            return str(HERE / given[key])
        if env in os.environ:
            return os.environ[env]
        if key in file_cfg:
            return str(HERE / file_cfg[key])  # an absolute path stays absolute
        return str(default)

    return {
        "input": path("input", "WORDCOUNT_INPUT", HERE / "corpus"),
        "output": path("output", "WORDCOUNT_OUTPUT", Path.cwd() / "wordcount-output"),
        "parallelism": int(
            given.get("parallelism")
            or os.environ.get("WORDCOUNT_PARALLELISM", file_cfg.get("parallelism", 2))
        ),
    }


def build(submitted: dict[str, Any] | None = None) -> Topology:
    """The topology; ``submitted`` is the config given with ``nimbus submit --config-json``."""
    cfg = config(submitted)
    n = cfg["parallelism"]
    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout(cfg["input"], "line"))
    split = Split("line", "word", pattern=WORD_SEPARATOR, lower=True)
    builder.set_bolt("split", split, n).shuffle_grouping("sentences")
    builder.set_bolt("count", RunningCount("word"), n).fields_grouping("split", "word")
    builder.set_bolt("out", FileSink(cfg["output"])).global_grouping("count")
    return builder.build()
