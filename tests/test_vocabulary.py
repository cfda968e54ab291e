"""Mistakes in windows, rankings, streams, joins and Python bolts are refused at build,
naming the component (the leader's check at submit runs the same validation)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.api import BoltDeclarer as Declarer
from pipeline.api import (
    Branch,
    Each,
    FileSink,
    FilesSpout,
    Join,
    RunningCount,
    Select,
    TopN,
    TopologyBuilder,
    TopologyError,
    Window,
)

Wire = Callable[[TopologyBuilder], Declarer]


def _events(builder: TopologyBuilder, tmp_path: Path) -> None:
    builder.set_spout("events", FilesSpout(tmp_path, "line"))
    parse = Select(ts="to_timestamp(line)", word="line", value="length(line)")
    builder.set_bolt("parse", parse).shuffle_grouping("events")


def _build(tmp_path: Path, wire: Callable[[TopologyBuilder], str]) -> None:
    builder = TopologyBuilder()
    _events(builder, tmp_path)
    last = wire(builder)
    builder.set_bolt("out", FileSink(tmp_path / "out")).global_grouping(last)
    builder.build()


def _window(**kw: object) -> Window:
    args: dict[str, object] = {"on": "ts", "watermark": "5 seconds", "keys": ("word",)}
    args.update(kw)
    return Window("10 seconds", **args)  # type: ignore[arg-type]


def _counts(builder: TopologyBuilder, window: Window) -> str:
    builder.set_bolt("counts", window).fields_grouping("parse", "word")
    return "counts"


CASES: dict[str, tuple[Callable[[TopologyBuilder], str], str]] = {
    "window on a missing field": (
        lambda b: _counts(b, _window(on="time")),
        r"'counts': Window uses undeclared field 'time'",
    ),
    "window keyed on a missing field": (
        lambda b: _counts(b, _window(keys=("wrd",))),
        r"'counts': Window uses undeclared field 'wrd'",
    ),
    "top-N without a window": (
        lambda b: (b.set_bolt("top", TopN(3, by="value")).global_grouping("parse"), "top")[1],
        r"'top': TopN ranks within windows",
    ),
    "top-N after a running count": (
        lambda b: (
            b.set_bolt("c", RunningCount("word")).fields_grouping("parse", "word"),
            b.set_bolt("top", TopN(3, by="count")).global_grouping("c"),
            "top",
        )[2],
        r"'top': TopN ranks within windows",
    ),
    "top-N by a missing field": (
        lambda b: (
            _counts(b, _window()),
            b.set_bolt("top", TopN(3, by="hits")).global_grouping("counts"),
            "top",
        )[2],
        r"'top': TopN uses undeclared field 'hits'",
    ),
    "window keys not grouped": (
        lambda b: (b.set_bolt("w", _window()).shuffle_grouping("parse"), "w")[1],
        r"'w': a stateful bolt needs a fields grouping on its keys",
    ),
}


def _branch(b: TopologyBuilder) -> None:
    b.set_bolt("branch", Branch({"long": "value > 3"}, default="short")).shuffle_grouping("parse")


def _age(b: TopologyBuilder, fields: dict[str, str]) -> None:
    b.set_spout("ages", FilesSpout(Path("."), "line"))
    b.set_bolt("age", Select(fields)).shuffle_grouping("ages")


AGE = {"word": "line", "age": "1", "age_ts": "now()"}


def unknown_stream(b: TopologyBuilder) -> str:
    _branch(b)
    b.set_bolt("x", Select(v="value")).shuffle_grouping("branch", stream="lng")
    return "x"


def no_stream_named(b: TopologyBuilder) -> str:
    _branch(b)
    b.set_bolt("x", Select(v="value")).shuffle_grouping("branch")
    return "x"


def stream_of_plain_bolt(b: TopologyBuilder) -> str:
    b.set_bolt("x", Select(v="value")).shuffle_grouping("parse", stream="s")
    return "x"


def join_key_missing(b: TopologyBuilder) -> str:
    _age(b, {"id": "1", "age": "2"})
    join = Join("parse", "age", on=("word",))
    b.set_bolt("join", join).fields_grouping("parse", "word").global_grouping("age")
    return "join"


def join_field_clash(b: TopologyBuilder) -> str:
    _age(b, {"word": "line", "value": "1"})
    join = Join("parse", "age", on=("word",))
    b.set_bolt("join", join).fields_grouping("parse", "word").fields_grouping("age", "word")
    return "join"


def join_unknown_side(b: TopologyBuilder) -> str:
    _age(b, AGE)
    join = Join("parse", "ag", on=("word",))
    b.set_bolt("join", join).fields_grouping("parse", "word").fields_grouping("age", "word")
    return "join"


def join_not_grouped(b: TopologyBuilder) -> str:
    _age(b, AGE)
    join = Join("parse", "age", on=("word",))
    b.set_bolt("join", join).shuffle_grouping("parse").fields_grouping("age", "word")
    return "join"


CASES.update(
    {
        "a stream that does not exist": (
            unknown_stream,
            r"'x': subscribes to stream 'lng' of 'branch' \(did you mean 'long'\?\)",
        ),
        "no stream named from a branch": (no_stream_named, r"'x': 'branch' emits named streams"),
        "a stream of a bolt without streams": (
            stream_of_plain_bolt,
            r"'x': subscribes to stream 's' of 'parse'; it has only its default stream",
        ),
        "a join on a key one side lacks": (
            join_key_missing,
            r"'join': Join \(right input 'age'\) uses undeclared field 'word'",
        ),
        "a join whose sides share a field": (
            join_field_clash,
            r"'join': both inputs have field 'value'",
        ),
        "a join of an unknown side": (join_unknown_side, r"'join': Join's inputs must be"),
        "a join not grouped on its keys": (join_not_grouped, r"'join': a join needs a fields"),
    }
)


@pytest.mark.parametrize("case", list(CASES))
def test_window_mistakes_are_named(tmp_path: Path, case: str) -> None:
    wire, message = CASES[case]
    with pytest.raises(TopologyError, match=message):
        _build(tmp_path, wire)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Window("ten seconds", on="ts", watermark="5 seconds"), "Window size must be"),
        (lambda: Window("10 seconds", on="ts", watermark="soon"), "Window watermark must be"),
        (lambda: TopN(0, by="count"), "TopN needs n >= 1"),
        (lambda: Each("not a function", "x string"), "Each needs a function"),  # type: ignore[arg-type]
        (lambda: Each(len, "x string", on_error="ignore"), "on_error must be one of"),  # type: ignore[arg-type]
        (lambda: Join("a", "b", on=("k",), how="left"), "a left outer join needs within="),
        (lambda: Join("a", "b", on=("k",), within="5 seconds"), "needs left_time= and right_time="),
        (lambda: Join("a", "a", on=("k",)), "needs two different inputs"),
        (lambda: Branch({}), "Branch needs at least one stream"),
    ],
)
def test_bad_arguments_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        make()
