"""Validation of a topology without Spark: the graph, the fields, the stateful steps.

The leader runs it on a submitted package (``pipeline.check``), so a malformed topology is
refused at submit with a message naming the component, never half-started; the compiler
runs it again before it builds any query.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pipeline.components import Bolt, Fields, Sink, Spout, did_you_mean
from pipeline.errors import TopologyError
from pipeline.graph import ComponentSpec, Grouping, GroupingKind, Topology
from pipeline.streams import Join

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """A validated topology: components in dependency order and each one's output fields."""

    topology: Topology
    order: tuple[str, ...]
    fields: Mapping[str, Fields]
    stateful_upstream: Mapping[str, str | None]
    """For each component, the stateful bolt on its path (itself included), if any."""


def validate(topology: Topology) -> Plan:
    """Check the topology without Spark; raise ``TopologyError`` naming the first problem."""
    if not topology.components:
        raise TopologyError(None, "the topology has no components")
    if not topology.spouts:
        raise TopologyError(None, "the topology has no spout, so nothing would enter it")
    specs = {spec.name: spec for spec in topology}
    for spec in topology:
        _check_component(spec, specs)
    order = _dependency_order(topology)
    fields: dict[str, Fields] = {}
    stateful: dict[str, str | None] = {}
    for name in order:
        spec = specs[name]
        fields[name], stateful[name] = _resolve(spec, specs, fields, stateful)
    consumed = {g.source for spec in topology for g in spec.inputs}
    for spec in topology:
        if not isinstance(spec.component, Sink) and spec.name not in consumed:
            raise TopologyError(
                spec.name,
                f"this {spec.kind} feeds nothing; Spark only runs what reaches a sink, "
                "so subscribe a sink (or a bolt that reaches one) to it",
            )
    return Plan(topology, order, fields, stateful)


def _check_component(spec: ComponentSpec, specs: Mapping[str, ComponentSpec]) -> None:
    p = spec.parallelism
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise TopologyError(spec.name, f"parallelism must be an integer >= 1, got {p!r}")
    if isinstance(spec.component, Spout):
        return
    if not spec.inputs:
        raise TopologyError(
            spec.name, f"this {spec.kind} has no input; give it a grouping on a spout or bolt"
        )
    seen: set[str] = set()
    for g in spec.inputs:
        if g.source not in specs:
            close = difflib.get_close_matches(g.source, list(specs), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TopologyError(
                spec.name, f"{g.kind.value} grouping names unknown component {g.source!r}{hint}"
            )
        if isinstance(specs[g.source].component, Sink):
            raise TopologyError(
                spec.name, f"{g.kind.value} grouping names sink {g.source!r}, which emits nothing"
            )
        key = f"{g.source}/{g.stream}"
        if key in seen:
            raise TopologyError(spec.name, f"subscribes to {g.source!r} more than once")
        seen.add(key)
        _check_stream(spec, g, specs[g.source])
        if g.kind is GroupingKind.FIELDS and not g.fields:
            raise TopologyError(spec.name, f"fields grouping from {g.source!r} names no field")


def _check_stream(spec: ComponentSpec, g: Grouping, source: ComponentSpec) -> None:
    """A subscription names one of its source's streams, or none when it has none."""
    declared = source.component.streams() if isinstance(source.component, Bolt) else ()
    if g.stream and g.stream not in declared:
        close = difflib.get_close_matches(g.stream, list(declared), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        has = f"its streams are {list(declared)}" if declared else "it has only its default stream"
        raise TopologyError(
            spec.name, f"subscribes to stream {g.stream!r} of {g.source!r}{hint}; {has}"
        )
    if declared and not g.stream:
        raise TopologyError(
            spec.name,
            f"{g.source!r} emits named streams only; subscribe to one of {list(declared)} "
            f"(e.g. shuffle_grouping({g.source!r}, stream={declared[0]!r}))",
        )


def _dependency_order(topology: Topology) -> tuple[str, ...]:
    """Kahn's algorithm; leftovers are on or behind a cycle, which is then named in full."""
    waiting = {spec.name: {g.source for g in spec.inputs} for spec in topology}
    order: list[str] = []
    ready = [name for name, deps in waiting.items() if not deps]
    while ready:
        name = ready.pop(0)
        order.append(name)
        for other, deps in waiting.items():
            if name in deps:
                deps.discard(name)
                if not deps and other not in order and other not in ready:
                    ready.append(other)
    if len(order) == len(waiting):
        return tuple(order)
    left = [spec.name for spec in topology if spec.name not in order]
    cycle = _find_cycle(topology, set(left))
    path = " -> ".join([*cycle, cycle[0]])
    raise TopologyError(
        cycle[0],
        f"the topology has a cycle ({path}); Spark runs DAGs (directed acyclic graphs), "
        f"so a stream cannot feed back into itself; remove one of these groupings",
    )


def _find_cycle(topology: Topology, left: set[str]) -> list[str]:
    """Walk upstream inside the unresolved set until a component repeats."""
    inputs = {spec.name: [g.source for g in spec.inputs if g.source in left] for spec in topology}
    walk: list[str] = []
    node = next(name for name in topology.names if name in left)
    while node not in walk:
        walk.append(node)
        node = inputs[node][0]  # every unresolved component has an unresolved input
    cycle = walk[walk.index(node) :]
    cycle.reverse()  # upstream walk -> downstream order (a -> b means b reads a)
    first = min(cycle, key=topology.names.index)  # start where the user declared first
    at = cycle.index(first)
    return cycle[at:] + cycle[:at]


def _resolve(
    spec: ComponentSpec,
    specs: Mapping[str, ComponentSpec],
    fields: Mapping[str, Fields],
    stateful: Mapping[str, str | None],
) -> tuple[Fields, str | None]:
    comp = spec.component
    if isinstance(comp, Spout):
        return call(spec, lambda: comp.fields), None
    if isinstance(comp, Join):
        return _resolve_join(spec, comp, fields, stateful)
    first: Fields | None = None
    upstream: str | None = None
    for g in spec.inputs:
        src_fields = fields[g.source]
        for f in g.fields:
            if f not in src_fields:
                raise TopologyError(
                    spec.name,
                    f"fields grouping from {g.source!r} names undeclared field "
                    f"{f!r}{did_you_mean(f, src_fields)}; {g.source!r} declares {list(src_fields)}",
                )
        if first is None:
            first = src_fields
        elif set(first) != set(src_fields):
            raise TopologyError(
                spec.name,
                f"its inputs declare different fields ({spec.inputs[0].source!r}: {list(first)}, "
                f"{g.source!r}: {list(src_fields)}); Spark unions them by name, so they must match",
            )
        upstream = upstream or stateful[g.source]
    assert first is not None  # _check_component made sure there is an input
    inputs = first
    if isinstance(comp, Sink):
        call(spec, lambda: comp.check_fields(inputs))
        return (), upstream
    out = call(spec, lambda: comp.output_fields(inputs))
    if comp.stateful:
        if upstream is not None and comp.follows_window:
            before = specs[upstream].component
            if isinstance(before, Bolt) and before.output_mode == "append":
                return out, upstream  # ranks closed windows; state partitions stay upstream's
            raise TopologyError(
                spec.name,
                f"it ranks closed windows, but stateful bolt {upstream!r} upstream emits "
                "running updates; put a Window before it",
            )
        if upstream is not None:
            raise TopologyError(
                spec.name,
                f"it keeps state per key downstream of stateful bolt {upstream!r}; Spark allows "
                "one running aggregation per query path",
            )
        keys = call(spec, comp.key_fields)
        for g in spec.inputs:
            if not _keeps_keys_together(g, keys):
                raise TopologyError(
                    spec.name,
                    f"a stateful bolt needs a fields grouping on its keys {list(keys)} (or a "
                    f"global grouping) so each key's state lives in one task; got {g}",
                )
        upstream = spec.name
    return out, upstream


def _resolve_join(
    spec: ComponentSpec,
    comp: Join,
    fields: Mapping[str, Fields],
    stateful: Mapping[str, str | None],
) -> tuple[Fields, str | None]:
    for g in spec.inputs:
        if stateful[g.source] is not None:
            raise TopologyError(
                spec.name,
                f"it joins the output of stateful bolt {stateful[g.source]!r}; Spark joins "
                "streams before any aggregation of theirs",
            )
        if not _keeps_keys_together(g, comp.keys):
            raise TopologyError(
                spec.name,
                f"a join needs a fields grouping on its keys {list(comp.keys)} (or a global "
                f"grouping) from each input; got {g}",
            )
    out = call(spec, lambda: comp.join_fields({g.source: fields[g.source] for g in spec.inputs}))
    return out, spec.name


def _keeps_keys_together(g: Grouping, keys: Fields) -> bool:
    if g.kind is GroupingKind.GLOBAL:
        return True
    return g.kind is GroupingKind.FIELDS and bool(g.fields) and set(g.fields) <= set(keys)


def call(spec: ComponentSpec, fn: Callable[[], T]) -> T:
    """Run a component hook, naming the component in any error it raises."""
    try:
        return fn()
    except TopologyError as e:
        if e.component is None:
            raise TopologyError(spec.name, e.problem) from e
        raise
    except Exception as e:
        raise TopologyError(spec.name, f"{type(e).__name__}: {e}") from e
