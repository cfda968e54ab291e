"""The spout/bolt API a topology package's ``topology.py`` is written against.

    builder = TopologyBuilder()
    builder.set_spout("sentences", FilesSpout("in/"))
    builder.set_bolt("split", Split("line", "word"), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", RunningCount("word"), 2).fields_grouping("split", "word")
    builder.set_bolt("out", FileSink("out/")).global_grouping("count")
    topology = builder.build()

Groupings may name components declared later; ``build()`` validates the whole graph
(``pipeline.compiler.validate``) and returns an immutable ``Topology``.
"""

from __future__ import annotations

import re

from pipeline.bolts import RunningCount, Select, Split, Where
from pipeline.compiler import validate
from pipeline.components import Bolt, Fields, OnError, Sink, Spout
from pipeline.errors import TopologyError
from pipeline.graph import ComponentSpec, Grouping, GroupingKind, Topology
from pipeline.pybolts import ArrowFilter, ArrowFlatMap, ArrowMap, Each
from pipeline.sinks import CallbackSink, ConsoleSink, FileSink, read_batches
from pipeline.spouts import (
    FilesSpout,
    IndexedStreamReader,
    PythonSpout,
    RateSpout,
    SentenceSource,
    SocketSpout,
)
from pipeline.stateful import Processor, State, StatefulBolt
from pipeline.streams import Branch, Join
from pipeline.windows import TopN, Window

__all__ = [
    "ArrowFilter",
    "ArrowFlatMap",
    "ArrowMap",
    "Bolt",
    "BoltDeclarer",
    "Branch",
    "CallbackSink",
    "ConsoleSink",
    "Each",
    "Fields",
    "FileSink",
    "FilesSpout",
    "Grouping",
    "GroupingKind",
    "IndexedStreamReader",
    "Join",
    "OnError",
    "Processor",
    "PythonSpout",
    "RateSpout",
    "RunningCount",
    "Select",
    "SentenceSource",
    "Sink",
    "SocketSpout",
    "Split",
    "Spout",
    "State",
    "StatefulBolt",
    "TopN",
    "Topology",
    "TopologyBuilder",
    "TopologyError",
    "Where",
    "Window",
    "read_batches",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class BoltDeclarer:
    """Returned by ``set_bolt``: declares the bolt's inputs, one grouping per source."""

    def __init__(self, builder: TopologyBuilder, name: str) -> None:
        self._builder = builder
        self._name = name

    def _add(
        self, source: str, kind: GroupingKind, fields: tuple[str, ...] = (), stream: str = ""
    ) -> BoltDeclarer:
        self._builder._inputs[self._name].append(Grouping(source, kind, fields, stream))
        return self

    # ``stream`` names one of the source's output streams (a ``Branch``'s), as Storm's
    # ``shuffleGrouping(component, streamId)`` does.

    def shuffle_grouping(self, source: str, *, stream: str = "") -> BoltDeclarer:
        """Rows spread evenly over the bolt's tasks (``repartition(n)``)."""
        return self._add(source, GroupingKind.SHUFFLE, stream=stream)

    def fields_grouping(self, source: str, *fields: str, stream: str = "") -> BoltDeclarer:
        """Rows with equal values of ``fields`` go to the same task."""
        return self._add(source, GroupingKind.FIELDS, tuple(fields), stream)

    def all_grouping(self, source: str, *, stream: str = "") -> BoltDeclarer:
        """Every row goes to every task of the bolt (n copies)."""
        return self._add(source, GroupingKind.ALL, stream=stream)

    def global_grouping(self, source: str, *, stream: str = "") -> BoltDeclarer:
        """All rows go to a single task (one partition)."""
        return self._add(source, GroupingKind.GLOBAL, stream=stream)

    def local_grouping(self, source: str, *, stream: str = "") -> BoltDeclarer:
        """Rows stay in the partition that produced them: no shuffle."""
        return self._add(source, GroupingKind.LOCAL, stream=stream)

    def none_grouping(self, source: str, *, stream: str = "") -> BoltDeclarer:
        """No preference; Spark keeps the upstream partitioning (no shuffle)."""
        return self._add(source, GroupingKind.NONE, stream=stream)


class TopologyBuilder:
    """Collects components and groupings; ``build()`` validates and freezes them."""

    def __init__(self) -> None:
        self._specs: dict[str, tuple[Spout | Bolt | Sink, int]] = {}
        self._inputs: dict[str, list[Grouping]] = {}

    def _declare(self, name: str, component: Spout | Bolt | Sink, parallelism: int) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise TopologyError(
                None,
                f"component name {name!r} must be 1-128 letters, digits, '_', '.' or '-' "
                "(not starting with '.' or '-')",
            )
        if name in self._specs:
            raise TopologyError(name, "a component with this name is already declared")
        self._specs[name] = (component, parallelism)
        self._inputs[name] = []

    def set_spout(self, name: str, spout: Spout, parallelism: int = 1) -> None:
        """Declare a spout: a replayable stream source."""
        if not isinstance(spout, Spout):
            raise TopologyError(name, f"set_spout needs a Spout, got {type(spout).__name__}")
        self._declare(name, spout, parallelism)

    def set_bolt(self, name: str, bolt: Bolt | Sink, parallelism: int = 1) -> BoltDeclarer:
        """Declare a bolt (or a sink, the bolt that ends a stream); add groupings to it."""
        if not isinstance(bolt, Bolt | Sink):
            raise TopologyError(name, f"set_bolt needs a Bolt or a Sink, got {type(bolt).__name__}")
        self._declare(name, bolt, parallelism)
        return BoltDeclarer(self, name)

    def build(self) -> Topology:
        """The immutable topology; raises ``TopologyError`` if it is malformed."""
        topology = Topology(
            tuple(
                ComponentSpec(name, comp, parallelism, tuple(self._inputs[name]))
                for name, (comp, parallelism) in self._specs.items()
            )
        )
        validate(topology)
        return topology
