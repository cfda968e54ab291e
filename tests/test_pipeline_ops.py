"""Running a pipeline as a user: bad rows skipped and counted, per-component metrics,
and a rebalance that changes the running partitioning, all read through the CLI.

A replica, a supervisor and its Spark worker as processes. The package parses
``key,value`` lines with a per-row Python bolt that skips the rows it cannot parse,
counts per key (a stateful step of parallelism 2) and writes to a file sink.
``nimbus rebalance --parallelism count=4`` must restart the query from its checkpoint
with the state in 4 partitions (Spark's own progress report says so in ``describe``),
and the counts must stay exact across it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from code_sync.package import make_package
from pipeline.lineage import sink_checkpoint
from pipeline.sinks import latest_by_key, read_batches
from pipeline.state_partitions import checkpoint_partitions
from tests.processes import cli_submit, nimbus_cli
from tests.replica_fixtures import Spawn
from tests.supervisors import Command, replica_and_supervisor
from tests.test_workers import add_input
from tests.waiting import wait_until

TOPOLOGY = b"""
from pipeline.api import Each, FileSink, FilesSpout, OnError, RunningCount, TopologyBuilder


def parse(row):
    key, value = row["line"].split(",")
    return (key, int(value))


def build(config):
    builder = TopologyBuilder()
    builder.set_spout("rows", FilesSpout(config["input"], "line"))
    parser = Each(parse, "key string, value bigint", on_error=OnError.SKIP)
    builder.set_bolt("parse", parser, 2).shuffle_grouping("rows")
    builder.set_bolt("count", RunningCount("key"), 2).fields_grouping("parse", "key")
    builder.set_bolt("out", FileSink(config["output"])).global_grouping("count")
    return builder.build()
"""


def _lines(n: int, offset: int) -> list[str]:
    return [f"k{(i + offset) % 7},{i}" for i in range(n)]


def _counts(out: Path) -> dict[str, int]:
    return {key[0]: row["count"] for key, row in latest_by_key(read_batches(out), "key").items()}


@pytest.mark.timeout(600)
def test_skipped_rows_metrics_and_a_real_rebalance_through_the_cli(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path
) -> None:
    inbox, out, state = tmp_path / "input", tmp_path / "output", tmp_path / "supervisor"
    inbox.mkdir()
    first, second = _lines(40, 0), _lines(25, 3)
    bad = ["no comma here", "k1,not-a-number", "a,b,c"]
    add_input(inbox, "part-1.txt", [*first[:20], *bad, *first[20:]])
    package = make_package({"topology.py": TOPOLOGY}, tmp_path / "rows.zip")
    with replica_and_supervisor(
        spawn, supervisor_command, zk_hosts, state, tmp_path / "supervisor.log"
    ) as replica:
        seeds = replica.address
        cli_submit(package, "rows", seeds, json.dumps({"input": str(inbox), "output": str(out)}))

        def metrics(**want: int) -> dict[str, Any] | None:
            view: dict[str, Any] = json.loads(
                nimbus_cli("describe", "rows", "--seeds", seeds, "--json").stdout
            )
            m = view["metrics"]
            parse, count = m.get("parse", {}), m.get("count", {})
            seen = {
                "rows": m.get("rows", {}).get("rows", 0),
                "parsed": parse.get("rows", 0),
                "skipped": parse.get("skipped_rows", 0),
                "partitions": count.get("partitions", 0),
            }
            return view if all(seen[k] == v for k, v in want.items()) else None

        expected = Counter(line.split(",")[0] for line in first)
        view = wait_until(
            lambda: _counts(out) == expected and metrics(rows=43, parsed=40, skipped=3),
            timeout=300, interval=1.0, message="exact counts and metrics of the first input",
        )  # fmt: skip
        assert view
        assert view["metrics"]["count"]["partitions"] == 2, view["metrics"]
        assert view["metrics"]["out"]["rows"] == len(expected)
        assert not view["failing"] and view["last_error"] == "", "a skipped row is not a failure"

        unknown = nimbus_cli("rebalance", "rows", "--parallelism", "nosuch=3", "--seeds", seeds)
        assert unknown.returncode != 0 and "nosuch" in unknown.stderr

        done = nimbus_cli("rebalance", "rows", "--parallelism", "count=4", "--seeds", seeds)
        assert done.returncode == 0, done.stderr
        add_input(inbox, "part-2.txt", second)
        expected.update(line.split(",")[0] for line in second)
        view = wait_until(
            lambda: _counts(out) == expected and metrics(partitions=4, skipped=3),
            timeout=300, interval=1.0, message="exact counts with the state in 4 partitions",
        )  # fmt: skip
        assert view
        assert view["component_parallelism"]["count"] == 4
        (worker,) = view["workers"]
        assert worker["partitioning_note"] == "", worker
        logged = Path(worker["log"]).read_text(errors="replace")
        assert "state repartitioned from 2 to 4 partitions" in logged
        checkpoint = sink_checkpoint(out)  # a file sink's lives beside its output
        assert checkpoint_partitions(checkpoint) == 4, "the checkpoint's newest batch says 4"
