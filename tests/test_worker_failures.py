"""A topology whose bolt fails on a bad row: the user sees why, through every view.

A replica, a supervisor and its Spark worker as processes. The package's bolt raises on
a row with too few fields; the worker fails, its supervisor restarts it, it fails again.
``nimbus describe --json``, ``nimbus list --json`` and the UI's JSON must show the error
text and a failing topology (the status alone still says ACTIVE), and the worker log's
path. The input folder reaches ``build(config)`` through ``--config-json``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from code_sync.package import make_package
from tests.cluster import free_port
from tests.processes import cli_submit, nimbus_cli
from tests.replica_fixtures import Spawn
from tests.supervisors import Command, replica_and_supervisor
from tests.test_workers import add_input
from tests.waiting import wait_until

FAILING_TOPOLOGY = b"""
import pyarrow as pa

from pipeline.api import ArrowMap, FileSink, FilesSpout, TopologyBuilder


def checked(batch):
    for line in batch.column("line").to_pylist():
        if len(line.split(",")) < 3:
            raise ValueError(f"short row {line!r}: 3 fields expected")
    return batch


def build(config):
    builder = TopologyBuilder()
    builder.set_spout("rows", FilesSpout(config["input"], "line"))
    builder.set_bolt("check", ArrowMap(checked, "line string")).shuffle_grouping("rows")
    builder.set_bolt("out", FileSink(config["output"])).global_grouping("check")
    return builder.build()
"""


def _ui(port: int, name: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/topologies/{name}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        found: dict[str, Any] = json.loads(reply.read())
        return found


@pytest.mark.timeout(600)  # two Spark starts at least; minutes on a busy machine
def test_a_failing_bolt_shows_its_error_and_a_failing_state_everywhere(
    spawn: Spawn, supervisor_command: Command, zk_hosts: str, tmp_path: Path
) -> None:
    inbox, out, state = tmp_path / "input", tmp_path / "output", tmp_path / "supervisor"
    inbox.mkdir()
    add_input(inbox, "part-1.txt", ["a,b,c", "short,row", "d,e,f"])
    package = make_package({"topology.py": FAILING_TOPOLOGY}, tmp_path / "failing.zip")
    ui_port = free_port()
    flags = ("--ui-port", str(ui_port))
    log = tmp_path / "supervisor.log"
    with replica_and_supervisor(
        spawn, supervisor_command, zk_hosts, state, log, replica_flags=flags
    ) as replica:
        seeds = replica.address
        cli_submit(package, "rows", seeds, json.dumps({"input": str(inbox), "output": str(out)}))
        submitted_at = time.monotonic()

        def described() -> dict[str, Any] | None:
            done = nimbus_cli("describe", "rows", "--seeds", seeds, "--json")
            view: dict[str, Any] = json.loads(done.stdout)
            return view if view["failing"] else None

        view = wait_until(described, timeout=300, interval=1.0, message="a failing state")
        # A figure, not an assert (timings belong in bench/): the target is 30 s.
        print(f"failing shown {time.monotonic() - submitted_at:.1f} s after the submit")
        assert view is not None
        assert view["status"] == "ACTIVE"
        assert "short row 'short,row': 3 fields expected" in view["last_error"], view
        assert "bolt 'check'" in view["last_error"], "the error names the component"
        (worker,) = view["workers"]
        assert "short row" in worker["last_error"] and worker["failures_in_a_row"] >= 1
        assert Path(worker["log"]).is_file(), "describe names the worker's log"
        assert "short row" in Path(worker["log"]).read_text(errors="replace")

        wait_until(
            lambda: (
                json.loads(nimbus_cli("describe", "rows", "--seeds", seeds, "--json").stdout)[
                    "worker_restarts"
                ]
                >= 1
            ),
            timeout=120,
            message="the supervisor restarting the failed worker",
        )

        # The leader logs each failure as a topology error, kept after the slot moves.
        logged = wait_until(
            lambda: [
                e
                for e in json.loads(
                    nimbus_cli("describe", "rows", "--seeds", seeds, "--json").stdout
                )["errors"]
                if e["component"] == "worker" and "short row" in e["message"]
            ],
            timeout=60,
            message="the failure in the topology's error log",
        )
        assert logged

        (row,) = json.loads(nimbus_cli("list", "--seeds", seeds, "--json").stdout)
        assert row["failing"] and "short row" in row["last_error"]
        listed = nimbus_cli("list", "--seeds", seeds)
        assert "(failing)" in listed.stdout and "short row" in listed.stdout

        page = wait_until(
            lambda: (t := _ui(ui_port, "rows")["topology"])["failing"] and t,
            timeout=30,
            message="the UI showing the topology failing",
        )
        assert "short row" in page["last_error"]["message"]
