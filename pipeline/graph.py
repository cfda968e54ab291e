"""The immutable topology: components, their parallelism and the groupings between them.

Kept apart from the builder and the compiler so both can depend on it without a cycle.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pipeline.components import Bolt, Fields, Sink, Spout
from pipeline.errors import TopologyError

Component = Spout | Bolt | Sink


class GroupingKind(enum.Enum):
    """How a bolt's input is split between its tasks (the Storm paper's groupings)."""

    SHUFFLE = "shuffle"
    FIELDS = "fields"
    ALL = "all"
    GLOBAL = "global"
    LOCAL = "local"
    NONE = "none"


@dataclass(frozen=True)
class Grouping:
    """One subscription: the consumer reads ``source``'s stream grouped by ``kind``."""

    source: str
    kind: GroupingKind
    fields: Fields = ()
    stream: str = ""
    """A named output stream of ``source`` (a ``Branch``'s); empty: its default stream."""

    def __str__(self) -> str:
        on = f" on {list(self.fields)}" if self.kind is GroupingKind.FIELDS else ""
        of = f" stream {self.stream!r}" if self.stream else ""
        return f"{self.kind.value} grouping from {self.source!r}{of}{on}"


@dataclass(frozen=True)
class ComponentSpec:
    """A named component with its parallelism hint and (for bolts and sinks) its inputs."""

    name: str
    component: Component
    parallelism: int
    inputs: tuple[Grouping, ...] = ()

    @property
    def kind(self) -> str:
        """'spout', 'bolt' or 'sink', for messages."""
        if isinstance(self.component, Spout):
            return "spout"
        return "sink" if isinstance(self.component, Sink) else "bolt"


@dataclass(frozen=True)
class Topology:
    """What a package's ``build()`` returns; compile it with ``pipeline.compiler``."""

    components: tuple[ComponentSpec, ...]

    def __iter__(self) -> Iterator[ComponentSpec]:
        return iter(self.components)

    def __len__(self) -> int:
        return len(self.components)

    def __getitem__(self, name: str) -> ComponentSpec:
        for spec in self.components:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.components)

    @property
    def spouts(self) -> tuple[ComponentSpec, ...]:
        return tuple(s for s in self.components if isinstance(s.component, Spout))

    @property
    def bolts(self) -> tuple[ComponentSpec, ...]:
        return tuple(s for s in self.components if isinstance(s.component, Bolt))

    @property
    def sinks(self) -> tuple[ComponentSpec, ...]:
        return tuple(s for s in self.components if isinstance(s.component, Sink))

    def with_parallelism(self, parallelism: Mapping[str, int]) -> Topology:
        """The same graph with the given components' parallelism changed (a rebalance)."""
        for name, n in parallelism.items():
            if name not in self.names:
                raise TopologyError(name, f"no such component; the topology has {list(self.names)}")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise TopologyError(name, f"parallelism must be an integer >= 1, got {n!r}")
        return Topology(
            tuple(
                dataclasses.replace(spec, parallelism=parallelism.get(spec.name, spec.parallelism))
                for spec in self.components
            )
        )
