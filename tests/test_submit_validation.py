"""The leader validates a submitted topology in a sandbox before it acknowledges it.

A real replica and ``nimbus submit`` through the CLI: broken topologies are refused
with a message naming the component; a ``build()`` that loops forever or allocates
without bound is refused after the validation limit; the leader keeps serving, and
nothing of a refused topology is written.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from cluster.paths import Paths
from code_sync.package import make_package
from pipeline.samples import MINIMAL_TOPOLOGY
from tests.cluster import REPO, Replica, wait_for_agreed_leader
from tests.processes import nimbus_cli
from tests.replica_fixtures import ROOT, Spawn, sync_flags

PATHS = Paths(ROOT)
HEADER = b"from pipeline.api import *\n\n\ndef build():\n    b = TopologyBuilder()\n"

BROKEN = {
    "cycle": (
        HEADER
        + b"""    b.set_spout("lines", FilesSpout("in"))
    b.set_bolt("a", Where("true")).shuffle_grouping("lines").shuffle_grouping("c")
    b.set_bolt("b", Where("true")).shuffle_grouping("a")
    b.set_bolt("c", Where("true")).shuffle_grouping("b")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("c")
    return b.build()
""",
        ["a -> b -> c -> a", "Spark runs DAGs"],
    ),
    "unknown": (
        HEADER
        + b"""    b.set_spout("lines", FilesSpout("in"))
    b.set_bolt("split", Split("line", "word")).shuffle_grouping("lines")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("splitt")
    return b.build()
""",
        ["component 'out'", "unknown component 'splitt'"],
    ),
    "field": (
        HEADER
        + b"""    b.set_spout("lines", FilesSpout("in"))
    b.set_bolt("split", Split("line", "word")).shuffle_grouping("lines")
    b.set_bolt("count", RunningCount("word")).fields_grouping("split", "wrd")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("count")
    return b.build()
""",
        ["component 'count'", "undeclared field 'wrd' (did you mean 'word'?)"],
    ),
    "window-field": (
        HEADER
        + b"""    b.set_spout("lines", FilesSpout("in"))
    b.set_bolt("parse", Select(ts="to_timestamp(line)", word="line")).shuffle_grouping("lines")
    w = Window("10 seconds", on="time", watermark="5 seconds", keys=("word",))
    b.set_bolt("counts", w).fields_grouping("parse", "word")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("counts")
    return b.build()
""",
        ["component 'counts'", "undeclared field 'time'"],
    ),
    "top-without-window": (
        HEADER
        + b"""    b.set_spout("lines", FilesSpout("in"))
    b.set_bolt("top", TopN(3, by="line")).global_grouping("lines")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("top")
    return b.build()
""",
        ["component 'top'", "TopN ranks within windows"],
    ),
    "stream": (
        HEADER
        + b"""    b.set_spout("lines", FilesSpout("in"))
    b.set_bolt("branch", Branch({"long": "length(line) > 3"})).shuffle_grouping("lines")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("branch", stream="lng")
    return b.build()
""",
        ["component 'out'", "stream 'lng'", "did you mean 'long'"],
    ),
    "join-key": (
        HEADER
        + b"""    b.set_spout("a", FilesSpout("in"))
    b.set_spout("b", FilesSpout("in2"))
    b.set_bolt("ids", Select(id="line")).shuffle_grouping("b")
    j = Join("a", "ids", on=("id",))
    b.set_bolt("join", j).fields_grouping("a", "line").fields_grouping("ids", "id")
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("join")
    return b.build()
""",
        ["component 'join'", "a join needs a fields grouping on its keys"],
    ),
    "loops": (
        b"def build():\n    while True:\n        pass\n",
        ["longer than 15s", "does build() loop?"],
    ),
    "allocates": (
        b"def build():\n    hoard = []\n"
        b"    while True:\n        hoard.append(bytearray(1 << 24))\n",
        ["out of memory", "allocate without bound"],
    ),
}


@pytest.fixture
def leader(spawn: Spawn) -> Replica:
    replica = spawn(
        extra=(
            *sync_flags(min_replicas=1),
            "--validate-timeout",
            "15",
            "--validate-memory-mib",
            "512",
        )
    )
    wait_for_agreed_leader([replica], timeout=30)
    return replica


def test_broken_and_hostile_topologies_are_refused_and_the_leader_keeps_serving(
    leader: Replica, tmp_path: Path, zk_client: KazooClient
) -> None:
    for name, (source, words) in BROKEN.items():
        package = make_package({"topology.py": source}, tmp_path / f"{name}.zip")
        refused = nimbus_cli("submit", str(package), "--name", name, "--seeds", leader.address)
        assert refused.returncode != 0, f"{name} was accepted"
        for word in words:
            assert word in refused.stderr, f"{name}: {word!r} not in {refused.stderr!r}"
        assert refused.stderr.count("'count'") <= 1, "the component is named once"
        assert leader.proc is not None and leader.proc.poll() is None, "the leader died"
        assert leader.leader_reply() is not None, f"the leader stopped serving after {name}"
    # Nothing of any refused topology was written.
    assert zk_client.get_children(PATHS.storms) == []
    assert zk_client.get_children(PATHS.names) == []
    assert zk_client.get_children(PATHS.code_distributor) == []

    # A valid topology is still accepted, and its graph is recorded for describe.
    good = make_package({"topology.py": MINIMAL_TOPOLOGY}, tmp_path / "good.zip")
    accepted = nimbus_cli("submit", str(good), "--name", "good", "--seeds", leader.address)
    assert accepted.returncode == 0, accepted.stderr
    shown = json.loads(nimbus_cli("describe", "good", "--seeds", leader.address, "--json").stdout)
    assert shown["component_parallelism"] == {"ticks": 1, "print": 1}


def test_the_submitted_config_reaches_build_and_changes_the_pipeline(
    leader: Replica, tmp_path: Path
) -> None:
    """``--config-json`` is what ``build(config)`` gets: the word-count example reads its
    parallelism from it, and the recorded graph shows it; without it, the default holds."""
    example = REPO / "examples" / "wordcount"
    given = nimbus_cli(
        "submit", str(example), "--name", "wide", "--config-json", '{"parallelism": 3}',
        "--seeds", leader.address,
    )  # fmt: skip
    assert given.returncode == 0, given.stderr
    plain = nimbus_cli("submit", str(example), "--name", "plain", "--seeds", leader.address)
    assert plain.returncode == 0, plain.stderr

    def shown(name: str) -> dict[str, int]:
        described = nimbus_cli("describe", name, "--seeds", leader.address, "--json")
        assert described.returncode == 0, described.stderr
        parallelism: dict[str, int] = json.loads(described.stdout)["component_parallelism"]
        return parallelism

    assert shown("wide")["count"] == 3 and shown("wide")["split"] == 3
    assert shown("plain")["count"] == 2


COUNTING_TOPOLOGY = b"""from pipeline.api import *


def build(config):
    with open(config["runs"], "a") as runs:  # one line per run of build(), i.e. per check
        runs.write("built\\n")
    b = TopologyBuilder()
    b.set_spout("lines", FilesSpout("in"))
    b.set_bolt("out", ConsoleSink()).shuffle_grouping("lines")
    return b.build()
"""


def test_a_new_leader_trusts_the_check_a_former_leader_recorded(
    spawn: Spawn, tmp_path: Path
) -> None:
    """A package submitted again with the same config after a failover is not checked a
    second time: every replica keeps the verdict recorded with the topology (its graph),
    so the retried submit at a new leader is as quick as at the old one. The check is
    counted by ``build()`` itself, which appends a line per run."""
    replicas = [spawn(extra=sync_flags(min_replicas=2)) for _ in range(3)]
    first = wait_for_agreed_leader(replicas, timeout=30)
    runs = tmp_path / "runs.txt"
    config = json.dumps({"runs": str(runs)})
    package = make_package({"topology.py": COUNTING_TOPOLOGY}, tmp_path / "counting.zip")
    seeds = ",".join(r.address for r in replicas)

    def submitted(name: str) -> None:
        done = nimbus_cli("submit", str(package), "--name", name, "--config-json", config,
                   "--seeds", seeds)  # fmt: skip
        assert done.returncode == 0, done.stderr

    submitted("once")
    assert runs.read_text() == "built\n"
    old = next(r for r in replicas if r.address == f"{first.host}:{first.port}")
    old.stop(signal.SIGKILL)
    survivors = [r for r in replicas if r is not old]
    wait_for_agreed_leader(survivors, timeout=60, newer_than=first.epoch)
    other = nimbus_cli("submit", str(package), "--name", "again", "--config-json", config,
                "--seeds", seeds)  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert runs.read_text() == "built\n", "the new leader ran the check again"
    # A different config is a different topology: checked.
    changed = json.dumps({"runs": str(runs), "other": 1})
    third = nimbus_cli("submit", str(package), "--name", "third", "--config-json", changed,
                "--seeds", seeds)  # fmt: skip
    assert third.returncode == 0, third.stderr
    assert runs.read_text() == "built\nbuilt\n"
