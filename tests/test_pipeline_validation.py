"""The spout/bolt API's validation, with no Spark: cycles, groupings, fields, parallelism and
broken packages are refused with a message naming what is wrong (runs on Spark:
tests/test_pipeline.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_sync.package import make_package
from pipeline.api import (
    ArrowMap,
    CallbackSink,
    FileSink,
    FilesSpout,
    RunningCount,
    Select,
    Split,
    Topology,
    TopologyBuilder,
    TopologyError,
    Where,
)
from pipeline.compiler import validate
from pipeline.components import ddl_field_names
from pipeline.errors import PackageError
from pipeline.graph import ComponentSpec, Grouping, GroupingKind
from pipeline.package import load_topology
from tests.test_pipeline import EXAMPLE, wordcount


def assert_refused(builder: TopologyBuilder, component: str | None, *phrases: str) -> None:
    """``builder.build()`` raises a TopologyError naming ``component`` (where not None)
    whose message holds every phrase."""
    with pytest.raises(TopologyError) as caught:
        builder.build()
    if component is not None:
        assert caught.value.component == component
    for phrase in phrases:
        assert phrase in str(caught.value)


# ---------------------------------------------------------------------- validation (no Spark)


def test_a_cycle_is_refused_naming_its_components(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("lines", FilesSpout(tmp_path))
    builder.set_bolt("a", Where("true")).shuffle_grouping("lines").shuffle_grouping("c")
    builder.set_bolt("b", Where("true")).shuffle_grouping("a")
    builder.set_bolt("c", Where("true")).shuffle_grouping("b")
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).shuffle_grouping("c")
    assert_refused(builder, None, "Spark runs DAGs", "a -> b -> c -> a")


def test_a_bolt_subscribed_to_itself_is_a_cycle(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("lines", FilesSpout(tmp_path))
    builder.set_bolt("loop", Where("true")).shuffle_grouping("lines").shuffle_grouping("loop")
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).shuffle_grouping("loop")
    with pytest.raises(TopologyError, match=r"loop -> loop.*Spark runs DAGs"):
        builder.build()


def test_a_grouping_on_an_unknown_component_is_refused(tmp_path: Path) -> None:
    builder = wordcount(tmp_path, tmp_path / "out")
    builder.set_bolt("extra", Where("true")).shuffle_grouping("splitt")
    assert_refused(builder, "extra", "unknown component 'splitt'", "did you mean 'split'")


def test_a_grouping_on_an_undeclared_field_is_refused(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout(tmp_path))
    builder.set_bolt("split", Split("line", "word")).shuffle_grouping("sentences")
    builder.set_bolt("count", RunningCount("word")).fields_grouping("split", "wrd")
    builder.set_bolt("out", FileSink(tmp_path / "o")).global_grouping("count")
    assert_refused(builder, "count", "undeclared field 'wrd'", "'split' declares ['word']")


def test_a_bolt_reading_an_undeclared_field_is_refused(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout(tmp_path, "text"))
    builder.set_bolt("split", Split("line")).shuffle_grouping("sentences")
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).shuffle_grouping("split")
    with pytest.raises(TopologyError, match=r"'split': Split uses undeclared field 'line'"):
        builder.build()


@pytest.mark.parametrize("parallelism", [0, -2])
def test_parallelism_below_one_is_refused(tmp_path: Path, parallelism: int) -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout(tmp_path))
    builder.set_bolt("split", Split("line"), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).shuffle_grouping("split")
    assert_refused(builder, "split", f"parallelism must be an integer >= 1, got {parallelism}")


def test_a_stateful_bolt_needs_its_keys_grouped(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout(tmp_path))
    builder.set_bolt("split", Split("line")).shuffle_grouping("sentences")
    builder.set_bolt("count", RunningCount("word")).shuffle_grouping("split")
    builder.set_bolt("out", FileSink(tmp_path / "o")).global_grouping("count")
    with pytest.raises(TopologyError, match=r"'count': a stateful bolt needs a fields grouping"):
        builder.build()


def test_structural_mistakes_are_named(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("s", FilesSpout(tmp_path))
    with pytest.raises(TopologyError, match="already declared"):
        builder.set_spout("s", FilesSpout(tmp_path))
    with pytest.raises(TopologyError, match="component name"):
        builder.set_spout("bad name", FilesSpout(tmp_path))
    builder.set_bolt("dangling", Where("true")).shuffle_grouping("s")
    with pytest.raises(TopologyError, match="'dangling': this bolt feeds nothing"):
        builder.build()
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).shuffle_grouping("dangling")
    builder.set_bolt("after", Where("true")).shuffle_grouping("out")
    with pytest.raises(TopologyError, match=r"'after': .*names sink 'out', which emits nothing"):
        builder.build()


def test_unioned_inputs_must_declare_the_same_fields(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("a", FilesSpout(tmp_path, "line"))
    builder.set_spout("b", FilesSpout(tmp_path, "text"))
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).shuffle_grouping(
        "a"
    ).shuffle_grouping("b")
    with pytest.raises(TopologyError, match="'out': its inputs declare different fields"):
        builder.build()


def test_validate_checks_a_hand_made_topology(tmp_path: Path) -> None:
    topology = Topology(
        (
            ComponentSpec("s", FilesSpout(tmp_path), 1),
            ComponentSpec("out", FileSink(tmp_path), 1, (Grouping("s", GroupingKind.FIELDS),)),
        )
    )
    with pytest.raises(TopologyError, match="fields grouping from 's' names no field"):
        validate(topology)


def test_declared_fields_follow_through_the_graph(tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("s", FilesSpout(tmp_path))
    builder.set_bolt("split", Split("line", keep=["line"])).shuffle_grouping("s")
    builder.set_bolt("proj", Select(w="upper(word)", n="length(word)")).local_grouping("split")
    builder.set_bolt("arrow", ArrowMap(lambda b: b, "w string, `n` int")).none_grouping("proj")
    builder.set_bolt("out", CallbackSink(lambda df, i: None)).all_grouping("arrow")
    plan = validate(builder.build())
    assert plan.fields["split"] == ("line", "word")
    assert plan.fields["proj"] == ("w", "n")
    assert plan.fields["arrow"] == ("w", "n")
    assert ddl_field_names("a map<string, int>, b struct<x: int, y: string>") == ("a", "b")


def test_the_example_package_loads_with_its_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORDCOUNT_INPUT", str(tmp_path / "in"))
    monkeypatch.setenv("WORDCOUNT_OUTPUT", str(tmp_path / "out"))
    zipped = make_package(
        {p.relative_to(EXAMPLE).as_posix(): p.read_bytes() for p in _files(EXAMPLE)},
        tmp_path / "wordcount.zip",
    )
    for source in (EXAMPLE, zipped):
        topology = load_topology(source, unpack_to=tmp_path / "unpacked")
        assert topology.names == ("sentences", "split", "count", "out")
        spout = topology["sentences"].component
        assert isinstance(spout, FilesSpout) and spout.folder == str(tmp_path / "in")
        assert topology["count"].inputs == (Grouping("split", GroupingKind.FIELDS, ("word",)),)


def test_a_folder_without_topology_py_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(PackageError, match=r"no topology\.py"):
        load_topology(tmp_path / "empty")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("x = 1\n", r"defines no build\(\)"),
        ("def build():\n    return None\n", "returned NoneType, not a Topology"),
        (
            "def build():\n    raise ValueError('boom')\n",
            r"build\(\) failed: ValueError: boom\n  topology.py line 2, in build: raise",
        ),
        (
            "def build(:\n",
            r"importing topology.py failed: topology.py line 1: .*\n    def build\(:",
        ),
    ],
    ids=["nobuild", "none", "raises", "syntax"],
)
def test_broken_packages_are_refused(tmp_path: Path, code: str, message: str) -> None:
    (tmp_path / "topology.py").write_text(code)
    with pytest.raises(PackageError, match=message):
        load_topology(tmp_path)


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
