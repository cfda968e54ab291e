"""Validation of a topology and its compilation to Spark Structured Streaming queries.

Validation needs no Spark and runs first (the leader runs it on a submitted package), so
a malformed topology is refused at submit with a message naming the component, never
half-started. Compilation then maps Storm's concepts onto Spark:

- spout -> a streaming source; parallelism -> partitions or tasks;
- shuffle grouping -> ``repartition(n)``, except from a spout into an SQL bolt, which
  Spark runs inside the source's own (already spread) tasks; fields grouping ->
  ``repartition(n, *fields)``, or nothing in front of a stateful bolt, whose aggregation
  hash-partitions by its keys itself; all -> every row copied to each of n tasks;
  global -> one partition; local and none -> no shuffle (Spark keeps the upstream
  partitions, which is what local-or-shuffle amounts to in one process);
- each sink -> one streaming query; several sinks -> several queries on one source.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.components import SKIPPED, Bolt, Fields, Sink, Spout
from pipeline.errors import TopologyError
from pipeline.graph import ComponentSpec, Grouping, GroupingKind, Topology

OutputMode = Literal["append", "update"]
_ALL_TASK = "__nimbus_all_task"
T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """A validated topology: components in dependency order and each one's output fields."""

    topology: Topology
    order: tuple[str, ...]
    fields: Mapping[str, Fields]
    stateful_upstream: Mapping[str, str | None]
    """For each component, the stateful bolt on its path (itself included), if any."""


@dataclass(frozen=True)
class CompiledQuery:
    """One sink's streaming query, ready for ``pipeline.runner`` to start."""

    sink_name: str
    sink: Sink
    frame: DataFrame
    output_mode: OutputMode
    state_partitions: int | None
    """Partitions of the stateful step (Spark's shuffle partitions at first start), if any."""
    stateful: str | None = None
    """The stateful bolt on the sink's path, if any."""


# ------------------------------------------------------------------------------ validation


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
        if g.source in seen:
            raise TopologyError(spec.name, f"subscribes to {g.source!r} more than once")
        seen.add(g.source)
        if g.kind is GroupingKind.FIELDS and not g.fields:
            raise TopologyError(spec.name, f"fields grouping from {g.source!r} names no field")


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
        return _call(spec, lambda: comp.fields), None
    first: Fields | None = None
    upstream: str | None = None
    for g in spec.inputs:
        src_fields = fields[g.source]
        for f in g.fields:
            if f not in src_fields:
                raise TopologyError(
                    spec.name,
                    f"fields grouping from {g.source!r} names undeclared field {f!r}; "
                    f"{g.source!r} declares {list(src_fields)}",
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
        _call(spec, lambda: comp.check_fields(inputs))
        return (), upstream
    out = _call(spec, lambda: comp.output_fields(inputs))
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
        keys = _call(spec, comp.key_fields)
        for g in spec.inputs:
            if not _keeps_keys_together(g, keys):
                raise TopologyError(
                    spec.name,
                    f"a stateful bolt needs a fields grouping on its keys {list(keys)} (or a "
                    f"global grouping) so each key's state lives in one task; got {g}",
                )
        upstream = spec.name
    return out, upstream


def _keeps_keys_together(g: Grouping, keys: Fields) -> bool:
    if g.kind is GroupingKind.GLOBAL:
        return True
    return g.kind is GroupingKind.FIELDS and bool(g.fields) and set(g.fields) <= set(keys)


def _call(spec: ComponentSpec, fn: Callable[[], T]) -> T:
    """Run a component hook, naming the component in any error it raises."""
    try:
        return fn()
    except TopologyError as e:
        if e.component is None:
            raise TopologyError(spec.name, e.problem) from e
        raise
    except Exception as e:
        raise TopologyError(spec.name, f"{type(e).__name__}: {e}") from e


# ----------------------------------------------------------------------------- compilation


def compile_topology(topology: Topology, spark: SparkSession) -> tuple[CompiledQuery, ...]:
    """Validate, then build one streaming DataFrame per sink (nothing starts yet)."""
    plan = validate(topology)
    frames: dict[str, DataFrame] = {}
    queries: list[CompiledQuery] = []
    for name in plan.order:
        spec = topology[name]
        comp = spec.component
        if isinstance(comp, Spout):
            frames[name] = _spark_step(
                spec, plan, functools.partial(comp.stream, spark, spec.parallelism)
            )
            continue
        parts = [_group(frames[g.source], g, spec, topology[g.source]) for g in spec.inputs]
        merged = functools.reduce(lambda a, b: a.unionByName(b), parts)
        if isinstance(comp, Bolt):
            comp.component = name
            frames[name] = _spark_step(spec, plan, functools.partial(comp.apply, merged))
        elif isinstance(comp, Sink):
            stateful = plan.stateful_upstream[name]
            queries.append(
                CompiledQuery(
                    sink_name=name,
                    sink=comp,
                    frame=observed(merged, name),
                    output_mode=_output_mode(topology[stateful]) if stateful else "append",
                    state_partitions=_state_partitions(topology[stateful]) if stateful else None,
                    stateful=stateful,
                )
            )
    return tuple(queries)


def _spark_step(spec: ComponentSpec, plan: Plan, make: Callable[[], DataFrame]) -> DataFrame:
    """Build a component's frame; Spark's analysis errors become the component's error."""
    try:
        frame = observed(_call(spec, make), spec.name)
    except TopologyError as e:
        if isinstance(e.__cause__, PySparkException):
            first = str(e.__cause__).strip().splitlines()[0]
            raise TopologyError(spec.name, f"Spark refused it: {first}") from e.__cause__
        raise
    declared = list(plan.fields[spec.name])
    if frame.columns != declared:
        raise TopologyError(
            spec.name, f"it produced columns {frame.columns} but declares {declared}"
        )
    return frame


def observed(frame: DataFrame, component: str) -> DataFrame:
    """Count the component's rows (and rows a Python bolt skipped) in Spark's batch metrics.

    ``observe`` reports per micro-batch in the query's progress (``observedMetrics``,
    keyed by component name), computed in the JVM next to the rows: per-component metrics
    without Python or accumulators. A skipping bolt's marker column is counted and dropped.
    """
    if SKIPPED in frame.columns:
        kept = F.col(SKIPPED) == 0
        skipped = F.coalesce(F.sum(SKIPPED), F.lit(0)).alias("skipped")
        frame = frame.observe(component, F.count_if(kept).alias("rows"), skipped)
        return frame.where(kept).drop(SKIPPED)
    return frame.observe(component, F.count(F.lit(1)).alias("rows"))


def _group(
    frame: DataFrame, g: Grouping, consumer: ComponentSpec, source: ComponentSpec
) -> DataFrame:
    n = consumer.parallelism
    comp = consumer.component
    if g.kind is GroupingKind.SHUFFLE:
        if isinstance(comp, Bolt) and comp.sql and isinstance(source.component, Spout):
            # Fused into the source's tasks: Spark already spreads the source's splits, and
            # on this machine the extra exchange made word count 1.5x slower.
            return frame
        return frame.repartition(n)
    if g.kind is GroupingKind.FIELDS:
        if isinstance(comp, Bolt) and comp.stateful:
            return frame  # the aggregation hash-partitions by its keys itself: one shuffle
        return frame.repartition(n, *g.fields)
    if g.kind is GroupingKind.ALL:
        tasks = F.explode(F.sequence(F.lit(0), F.lit(n - 1)))
        return frame.withColumn(_ALL_TASK, tasks).repartition(n, _ALL_TASK).drop(_ALL_TASK)
    if g.kind is GroupingKind.GLOBAL:
        return frame.repartition(1)
    return frame  # LOCAL, NONE: keep upstream partitions


def _output_mode(spec: ComponentSpec) -> OutputMode:
    comp = spec.component
    return "append" if isinstance(comp, Bolt) and comp.output_mode == "append" else "update"


def _state_partitions(spec: ComponentSpec) -> int:
    if any(g.kind is GroupingKind.GLOBAL for g in spec.inputs):
        return 1
    return spec.parallelism
