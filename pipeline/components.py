"""The three kinds of component a topology is made of: spouts, bolts and sinks.

Each declares its output fields before Spark runs, so the compiler can refuse a grouping
on an undeclared field at submit time instead of failing inside a running query.
"""

from __future__ import annotations

import difflib
import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter

from pipeline.errors import TopologyError

Fields = tuple[str, ...]

#: The column a bolt with named streams tags each row with: the stream it goes to.
STREAM = "__nimbus_stream"
#: The marker column a skipping Python bolt adds: 0 on its rows, the count on a tally row.
SKIPPED = "__nimbus_skipped"


class OnError(enum.Enum):
    """What a Python bolt does with a row its function raises on."""

    FAIL = "fail"
    """The query fails: the worker restarts, and the error shows in ``describe``."""
    SKIP = "skip"
    """The row is dropped and counted (``skipped_rows`` in describe, the UI, metrics)."""


def as_fields(names: Sequence[str] | str, what: str) -> Fields:
    """Normalise declared field names; duplicates and blanks are refused here, not in Spark."""
    items = (names,) if isinstance(names, str) else tuple(names)
    for name in items:
        if not isinstance(name, str) or not name.strip():
            raise TopologyError(
                None, f"{what}: field names must be non-empty strings, got {name!r}"
            )
    dupes = sorted({n for n in items if items.count(n) > 1})
    if dupes:
        raise TopologyError(None, f"{what}: field {dupes[0]!r} is declared twice")
    return items


def require_fields(needed: Sequence[str], have: Fields, what: str) -> None:
    """Raise naming the first needed field the input does not declare."""
    for name in needed:
        if name not in have:
            raise TopologyError(
                None,
                f"{what} uses undeclared field {name!r}{did_you_mean(name, have)}; its input "
                f"declares {list(have)}",
            )


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'country'?)`` for a close name, else empty."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def ddl_field_names(ddl: str) -> Fields:
    """Top-level column names of a Spark DDL schema such as ``"word string, n bigint"``.

    Parsed by hand because Spark's own parser needs a running JVM, and declared fields
    must be known when a package is validated, before any session exists.
    """
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(ddl):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(ddl[start:i])
            start = i + 1
    parts.append(ddl[start:])
    names: list[str] = []
    for part in parts:
        text = part.strip()
        if not text:
            raise TopologyError(None, f"schema {ddl!r} has an empty column")
        if text.startswith("`"):
            end = text.find("`", 1)
            if end < 0:
                raise TopologyError(None, f"schema {ddl!r} has an unclosed backtick")
            names.append(text[1:end])
        else:
            names.append(text.replace(":", " ").split()[0])
    return as_fields(names, f"schema {ddl!r}")


class Spout(ABC):
    """A replayable streaming source: Spark's checkpoint replaces Storm's acking."""

    #: False for sources whose data is gone once read (socket): no exactly-once after a crash.
    replayable: ClassVar[bool] = True

    @property
    @abstractmethod
    def fields(self) -> Fields:
        """The output fields, in column order."""

    @abstractmethod
    def stream(self, spark: SparkSession, parallelism: int) -> DataFrame:
        """A streaming DataFrame whose columns are exactly ``fields``."""


class Bolt(ABC):
    """A transformation of a stream; its output fields follow from its input fields."""

    #: True for bolts that keep state per key: Spark allows one such step per query path.
    stateful: ClassVar[bool] = False
    #: True for stateless SQL bolts, which Spark runs in the JVM inside the upstream task.
    sql: ClassVar[bool] = False
    #: How a stateful bolt emits: ``update`` (changed keys, every batch) or ``append``
    #: (each result once, when its window closes).
    output_mode: ClassVar[str] = "update"
    #: True for a stateful bolt that may follow an ``append`` one (it groups by its window).
    follows_window: ClassVar[bool] = False
    #: The name the topology gives this bolt; the compiler sets it before ``apply`` so
    #: errors raised while the query runs can name the component.
    component: str = ""

    @abstractmethod
    def output_fields(self, inputs: Fields) -> Fields:
        """The fields this bolt emits given its input's; raises ``TopologyError`` if unusable."""

    @abstractmethod
    def apply(self, frame: DataFrame) -> DataFrame:
        """The bolt's step on the (already grouped) input stream."""

    def key_fields(self) -> Fields:
        """For stateful bolts, the fields whose values select the state."""
        return ()

    def streams(self) -> tuple[str, ...]:
        """Named output streams (a ``Branch``'s); empty: only the default stream."""
        return ()


class Sink(ABC):
    """Where a stream's output goes: each sink becomes one streaming query."""

    def check_fields(self, inputs: Fields) -> None:  # noqa: B027 - optional hook
        """Raise ``TopologyError`` if the sink cannot take a stream with these fields."""

    @abstractmethod
    def writer(self, frame: DataFrame) -> DataStreamWriter:
        """``frame.writeStream`` with the sink's format or ``foreachBatch`` set."""
