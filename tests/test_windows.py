"""Mistakes in windows, rankings and Python bolts are refused at build, naming the
component (the leader's check at submit runs the same validation)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.api import BoltDeclarer as Declarer
from pipeline.api import (
    Each,
    FileSink,
    FilesSpout,
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
    ],
)
def test_bad_arguments_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        make()
