"""SQL expressions are resolved by Spark at submit, so a misspelt function or a missing
column is refused naming the component instead of failing later in a worker.

Real processes and a real Spark: ``python -m pipeline.check`` as a user runs it and as
the leader runs it (with limits, Spark started before them), the leader's two-run check,
and ``SubmitTopology`` to a real replica. A check leaves no JVM behind, whether it ends
by itself or is killed at its time limit. Column types per spout are tested in-process
on the shared test session.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient
from pyspark.sql import DataFrame, SparkSession

from cluster.paths import Paths
from code_sync.package import make_package
from nimbus.client import NimbusCallError, NimbusClient
from nimbus.duties.package_check import CheckLimits, PackageCheckFailed, check_package
from pipeline.analysis import analyse, needs_analysis
from pipeline.api import (
    Bolt,
    Branch,
    ConsoleSink,
    FilesSpout,
    PythonSpout,
    RateSpout,
    Select,
    SentenceSource,
    Split,
    Spout,
    Topology,
    TopologyBuilder,
    Where,
    Window,
)
from pipeline.components import STREAM
from pipeline.errors import TopologyError
from tests.cluster import REPO, wait_for_agreed_leader
from tests.replica_fixtures import ROOT, Spawn, submit, sync_flags
from tests.waiting import wait_until

PATHS = Paths(ROOT)
HEADER = "from pipeline.api import *\n\n\ndef build():\n    b = TopologyBuilder()\n"


def source(*lines: str) -> str:
    """A ``topology.py`` whose ``build()`` runs these builder lines, then returns."""
    return HEADER + "".join(f"    {line}\n" for line in lines) + "    return b.build()\n"


UPER = source(
    'b.set_spout("lines", FilesSpout("in", "word"))',
    'b.set_bolt("upper", Where("uper(word) = \'A\'")).shuffle_grouping("lines")',
    'b.set_bolt("out", ConsoleSink()).shuffle_grouping("upper")',
)
MISSING_COLUMN = source(
    'b.set_spout("lines", FilesSpout("in", "word"))',
    'b.set_bolt("pick", Select(x="nosuch + 1")).shuffle_grouping("lines")',
    'b.set_bolt("out", ConsoleSink()).shuffle_grouping("pick")',
)
VALID = source(
    'b.set_spout("files", FilesSpout("in", "line"))',
    'b.set_spout("socket", SocketSpout("localhost", 9, "line"))',
    'b.set_bolt("long", Where("length(line) > 3")).shuffle_grouping("files")'
    '.shuffle_grouping("socket")',
    'b.set_bolt("words", Split("line", "word")).shuffle_grouping("long")',
    'b.set_bolt("shape", Select(word="lower(word)", n="length(word)")).shuffle_grouping("words")',
    'b.set_bolt("count", RunningCount("word")).fields_grouping("shape", "word")',
    'b.set_bolt("out", ConsoleSink()).shuffle_grouping("count")',
)
WORD_COUNT = source(
    'b.set_spout("lines", FilesSpout("in", "line"))',
    'b.set_bolt("split", Split("line", "word")).shuffle_grouping("lines")',
    'b.set_bolt("count", RunningCount("word")).fields_grouping("split", "word")',
    'b.set_bolt("out", ConsoleSink()).shuffle_grouping("count")',
)
#: Records its process group, then never returns once Spark is up (the analysing run).
STALLS_UNDER_SPARK = """import os, time
from pyspark.sql import DataFrame, SparkSession
from pipeline.api import *


def build(config):
    with open(config["record"], "a") as record:
        record.write(f"{os.getpgid(0)} {SparkSession.getActiveSession() is not None}\\n")
    while SparkSession.getActiveSession() is not None:
        time.sleep(1)
    b = TopologyBuilder()
    b.set_spout("lines", FilesSpout("in", "word"))
    b.set_bolt("keep", Where("true")).shuffle_grouping("lines")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("keep")
    return b.build()
"""


def folder(tmp_path: Path, name: str, text: str) -> Path:
    package = tmp_path / name
    package.mkdir()
    (package / "topology.py").write_text(text)
    return package


def run_check(package: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """``python -m pipeline.check`` in a session of its own; its verdict (the last line).

    Afterwards its process group must be empty: the check's JVM exited with it.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.check", str(package), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        start_new_session=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert live_members(proc.pid) == [], "the check left processes behind"
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done, json.loads(out.strip().splitlines()[-1])


def live_members(group: int) -> list[str]:
    """Command lines of the group's processes that still run (a zombie no longer runs:
    Spark's launcher leaves a reaped-later ``bash`` zombie, adopted by init)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            _, _, after = stat.read_text().rpartition(")")
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue  # ended while we looked
        state, _ppid, pgid = after.split()[:3]
        if int(pgid) == group and state != "Z":
            members.append(cmdline.replace(b"\0", b" ").decode(errors="replace")[:200])
    return members


LIMITS = ("--memory-mib", "512", "--cpu-s", "30")


def test_a_misspelt_function_is_refused_naming_the_component(
    spark_analysis: None, tmp_path: Path
) -> None:
    """As the leader runs it: limits given, so Spark starts before them."""
    done, verdict = run_check(folder(tmp_path, "uper", UPER), "--analyse", *LIMITS)
    assert done.returncode == 3, done.stderr
    assert verdict["ok"] is False and verdict["component"] == "upper"
    assert "Spark refused it: [UNRESOLVED_ROUTINE]" in verdict["error"]
    assert "`uper`" in verdict["error"]


def test_a_missing_column_is_refused_naming_the_component(
    spark_analysis: None, tmp_path: Path
) -> None:
    """As a user runs it by hand: no limits, so Spark starts once the topology needs it."""
    done, verdict = run_check(folder(tmp_path, "missing", MISSING_COLUMN), "--analyse")
    assert done.returncode == 3, done.stderr
    assert verdict["ok"] is False and verdict["component"] == "pick"
    assert "Spark refused it: [UNRESOLVED_COLUMN" in verdict["error"]
    assert "`nosuch`" in verdict["error"]


def test_valid_expressions_pass_the_analysis(spark_analysis: None, tmp_path: Path) -> None:
    done, verdict = run_check(folder(tmp_path, "valid", VALID), "--analyse", *LIMITS)
    assert done.returncode == 0, done.stderr
    assert verdict["ok"] is True and verdict["analysed"] is True
    names = [c["name"] for c in verdict["components"]]
    assert names == ["files", "socket", "long", "words", "shape", "count", "out"]


def test_a_topology_without_sql_text_starts_no_spark(tmp_path: Path) -> None:
    done, verdict = run_check(folder(tmp_path, "wc", WORD_COUNT), "--analyse")
    assert done.returncode == 0, done.stderr
    assert verdict["ok"] is True
    assert verdict["needs_analysis"] is False and verdict["analysed"] is False
    # Without --analyse (the leader's first run) SQL text is noted, never resolved.
    done, verdict = run_check(folder(tmp_path, "uper", UPER), *LIMITS)
    assert done.returncode == 0, done.stderr
    assert verdict["needs_analysis"] is True and verdict["analysed"] is False


def test_a_check_killed_while_spark_runs_leaves_no_jvm(
    spark_analysis: None, tmp_path: Path
) -> None:
    """The leader kills the analysing run at its time limit, and its JVM goes with it."""
    record = tmp_path / "record"
    package = folder(tmp_path, "stalls", STALLS_UNDER_SPARK)
    limits = CheckLimits(timeout_s=3, memory_mib=512, spark_start_s=22)
    with pytest.raises(PackageCheckFailed, match="while Spark resolved its SQL expressions"):
        check_package(package, limits, json.dumps({"record": str(record)}))
    runs = [line.split() for line in record.read_text().splitlines()]
    assert [spark for _, spark in runs] == ["False", "True"], (
        f"build() never ran under Spark within {limits.spark_start_s}s: {runs}"
    )
    # SIGKILLed processes take a moment to exit (an exiting one shows an empty cmdline).
    group = int(runs[1][0])
    wait_until(lambda: live_members(group) == [], timeout=15,
               message="the killed run's processes gone, its JVM included")  # fmt: skip


def test_submit_of_a_misspelt_function_is_refused_and_nothing_is_stored(
    spark_analysis: None, spawn: Spawn, tmp_path: Path, zk_client: KazooClient
) -> None:
    leader = spawn(extra=sync_flags(min_replicas=1))
    wait_for_agreed_leader([leader], timeout=30)
    package = make_package({"topology.py": UPER.encode()}, tmp_path / "uper.zip")
    with (
        NimbusClient([leader.address], attempts=1) as client,
        pytest.raises(NimbusCallError) as refused,
    ):
        submit(client, package, "uper")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "component 'upper'" in str(refused.value)
    assert "Spark refused it: [UNRESOLVED_ROUTINE]" in str(refused.value)
    assert zk_client.get_children(PATHS.storms) == []
    assert zk_client.get_children(PATHS.names) == []
    assert zk_client.get_children(PATHS.code_distributor) == []


# --------------------------------------------------------------- column types, in-process


class OpaqueSpout(Spout):
    """A spout whose column types the analysis cannot know: taken as strings, a guess."""

    @property
    def fields(self) -> tuple[str, ...]:
        return ("payload",)

    def stream(self, spark: SparkSession, parallelism: int) -> DataFrame:
        raise NotImplementedError("never streamed here")


def topology(spout: Spout, *bolts: Bolt) -> Topology:
    b = TopologyBuilder()
    b.set_spout("in", spout)
    upstream = "in"
    for i, bolt in enumerate(bolts):
        b.set_bolt(f"b{i}", bolt).shuffle_grouping(upstream)
        upstream = f"b{i}"
    b.set_bolt("out", ConsoleSink()).shuffle_grouping(upstream)
    return b.build()


def refusal(spark: SparkSession, t: Topology) -> str | None:
    try:
        analyse(t, spark)
    except TopologyError as e:
        return f"{e.component}: {e.problem}"
    return None


def test_spouts_give_their_real_column_types(spark: SparkSession) -> None:
    rate = RateSpout(1, fields=("at", "n"))
    later = Select(even="n % 2 = 0", at="at + INTERVAL 1 SECOND")
    assert refusal(spark, topology(rate, later)) is None
    assert "DATATYPE_MISMATCH" in str(refusal(spark, topology(rate, Where("size(n) > 0"))))
    sentences = PythonSpout(SentenceSource, fields=["sentence"])
    assert refusal(spark, topology(sentences, Where("length(sentence) > 3"))) is None
    assert "UNRESOLVED_COLUMN" in str(refusal(spark, topology(sentences, Where("line > ''"))))
    files = FilesSpout("in", "line")
    assert "b1: Spark refused it: [UNRESOLVED_ROUTINE]" in str(
        refusal(spark, topology(files, Select(w="line"), Where("uper(w) = 'A'")))
    )
    assert not needs_analysis(topology(files, Split("line", "w")))


def test_branch_predicates_are_resolved_and_its_streams_followed(spark: SparkSession) -> None:
    def branched(predicate: str, downstream: str) -> Topology:
        b = TopologyBuilder()
        b.set_spout("lines", FilesSpout("in", "line"))
        b.set_bolt("route", Branch({"long": predicate}, default="rest")).shuffle_grouping("lines")
        b.set_bolt("pick", Select(n=downstream)).shuffle_grouping("route", stream="long")
        b.set_bolt("out", ConsoleSink()).shuffle_grouping("pick")
        return b.build()

    assert needs_analysis(branched("length(line) > 3", "length(line)"))
    assert refusal(spark, branched("length(line) > 3", "length(line)")) is None
    assert "route: Spark refused it: [UNRESOLVED_ROUTINE]" in str(
        refusal(spark, branched("lenght(line) > 3", "length(line)"))
    )
    # The subscription reads the stream's rows without its tag column.
    assert "pick: Spark refused it: [UNRESOLVED_COLUMN" in str(
        refusal(spark, branched("length(line) > 3", STREAM))
    )


def test_window_aggregates_are_sql_text_too(spark: SparkSession) -> None:
    def windowed(aggregate: str) -> Topology:
        b = TopologyBuilder()
        b.set_spout("ticks", RateSpout(1))
        window = Window("10 seconds", on="timestamp", watermark="5 seconds", aggregates={
            "total": aggregate
        })  # fmt: skip
        b.set_bolt("sums", window).global_grouping("ticks")
        b.set_bolt("out", ConsoleSink()).shuffle_grouping("sums")
        return b.build()

    assert needs_analysis(windowed("sum(value)"))
    assert refusal(spark, windowed("sum(value)")) is None
    assert "sums: Spark refused it: [UNRESOLVED_ROUTINE]" in str(
        refusal(spark, windowed("summ(value)"))
    )


def test_guessed_column_types_refuse_only_what_no_type_could_cure(spark: SparkSession) -> None:
    opaque = OpaqueSpout()
    # payload may well be an array: a type error on a guess refuses nothing, and the
    # branch below it is not analysed...
    assert refusal(spark, topology(opaque, Where("size(payload) > 0"), Where("nope"))) is None
    # ...but an unknown function or column is wrong whatever the type.
    assert "UNRESOLVED_ROUTINE" in str(refusal(spark, topology(opaque, Where("uper(payload)"))))
    assert "UNRESOLVED_COLUMN" in str(refusal(spark, topology(opaque, Select(x="nosuch"))))
