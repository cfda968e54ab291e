"""Two streams joined on a key: storm-starter's ``SingleJoinExample`` as a package.

gender (files of ``<ISO timestamp> <id> <gender>``) and age (``<ISO timestamp> <id>
<age>``) -> each parsed by SQL -> join on ``id`` (inner; rows at most 10 s apart in
event time meet, and state older than the watermark is dropped) -> out (files of
``{"id", "gender", "gender_ts", "age", "age_ts"}``).

Config: ``gender``, ``age`` (input folders; defaults ``corpus/gender`` and
``corpus/age`` beside this file), ``output`` (default ``./single-join-output``), ``how``
(``inner``, the default, or ``left``: a gender row without an age comes out alone once
the watermark rules a match out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.api import FileSink, FilesSpout, Join, Select, Topology, TopologyBuilder

HERE = Path(__file__).resolve().parent
WITHIN = "10 seconds"


def build(config: dict[str, Any] | None = None) -> Topology:
    cfg = config or {}
    builder = TopologyBuilder()
    for side in ("gender", "age"):
        folder = cfg.get(side, HERE / "corpus" / side)
        builder.set_spout(f"{side}-events", FilesSpout(str(folder), "line"))
        value = "split(line, ' ')[2]" if side == "gender" else "cast(split(line, ' ')[2] as int)"
        parse = Select(
            {
                "id": "cast(split(line, ' ')[1] as bigint)",
                side: value,
                f"{side}_ts": "to_timestamp(split(line, ' ')[0])",
            }
        )
        builder.set_bolt(side, parse).shuffle_grouping(f"{side}-events")
    join = Join(
        "gender",
        "age",
        on=("id",),
        how=cfg.get("how", "inner"),
        within=WITHIN,
        left_time="gender_ts",
        right_time="age_ts",
    )
    builder.set_bolt("join", join, 2).fields_grouping("gender", "id").fields_grouping("age", "id")
    output = cfg.get("output", Path.cwd() / "single-join-output")
    builder.set_bolt("out", FileSink(str(output))).global_grouping("join")
    return builder.build()
