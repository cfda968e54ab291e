"""Validation of a topology and its compilation to Spark Structured Streaming queries.

Validation needs no Spark and runs first (the leader runs it on a submitted package), so
a malformed topology is refused at submit with a message naming the component, never
half-started. Compilation then maps Storm's concepts onto Spark:

- spout -> a streaming source; parallelism -> partitions or tasks;
- shuffle grouping -> ``repartition(n)``, except from a spout into an SQL bolt, which
  Spark runs inside the source's own (already spread) tasks; fields grouping ->
  ``repartition(n, *fields)``, or nothing in front of a stateful bolt, whose aggregation
  hash-partitions by its keys itself; all -> every row copied to each of n tasks;
  global -> one partition (for a stateful bolt, its own exchange into its state
  partitions); local and none -> no shuffle (Spark keeps the upstream
  partitions, which is what local-or-shuffle amounts to in one process);
- each sink -> one streaming query; several sinks -> several queries on one source.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.components import SKIPPED, STREAM, Bolt, Sink, Spout
from pipeline.errors import TopologyError
from pipeline.graph import ComponentSpec, Grouping, GroupingKind, Topology
from pipeline.streams import Join
from pipeline.validation import Plan, call, validate

__all__ = ["CompiledQuery", "Plan", "compile_topology", "observed", "validate"]

OutputMode = Literal["append", "update"]
_ALL_TASK = "__nimbus_all_task"
T = TypeVar("T")


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
        parts = [
            _group(subscribed(frames[g.source], g), g, spec, topology[g.source])
            for g in spec.inputs
        ]
        if isinstance(comp, Bolt):
            frames[name] = bolt_frame(spec, plan, parts)
            continue
        merged = functools.reduce(lambda a, b: a.unionByName(b), parts)
        if isinstance(comp, Sink):
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


def subscribed(frame: DataFrame, g: Grouping) -> DataFrame:
    """The rows of ``frame`` a subscription reads: those of its stream, if it names one."""
    if not g.stream:
        return frame
    return frame.where(F.col(STREAM) == g.stream).drop(STREAM)


def bolt_frame(spec: ComponentSpec, plan: Plan, inputs: Sequence[DataFrame]) -> DataFrame:
    """A bolt's frame from its inputs' (one per grouping, in order): a join's two sides,
    or their union by name for any other bolt."""
    comp = spec.component
    assert isinstance(comp, Bolt)
    comp.component = spec.name
    if isinstance(comp, Join):
        sides = {g.source: frame for g, frame in zip(spec.inputs, inputs, strict=True)}
        return _spark_step(spec, plan, functools.partial(comp.apply_join, sides))
    merged = functools.reduce(lambda a, b: a.unionByName(b), inputs)
    return _spark_step(spec, plan, functools.partial(comp.apply, merged))


def _spark_step(spec: ComponentSpec, plan: Plan, make: Callable[[], DataFrame]) -> DataFrame:
    """Build a component's frame; Spark's analysis errors become the component's error."""
    try:
        frame = call(spec, make)
        if not (isinstance(spec.component, Bolt) and spec.component.sql):
            frame = observed(frame, spec.name)
    except TopologyError as e:
        if isinstance(e.__cause__, PySparkException):
            first = str(e.__cause__).strip().splitlines()[0]
            raise TopologyError(spec.name, f"Spark refused it: {first}") from e.__cause__
        raise
    declared = list(plan.fields[spec.name])
    if isinstance(spec.component, Bolt) and spec.component.streams():
        declared.append(STREAM)  # the tag each subscription filters on
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
    SQL bolts are not counted: they run fused into their upstream's generated code, which
    a count breaks (word count lost 13% of its throughput with its split counted).
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
        if isinstance(comp, Bolt) and comp.stateful:
            # Its aggregation exchanges by its keys itself, into the state partitions a
            # global grouping gives it (one, or the window's when it ranks windows): an
            # extra repartition(1) put a whole batch's rows through one task first.
            return frame
        return frame.repartition(1)
    return frame  # LOCAL, NONE: keep upstream partitions


def _output_mode(spec: ComponentSpec) -> OutputMode:
    comp = spec.component
    return "append" if isinstance(comp, Bolt) and comp.output_mode == "append" else "update"


def _state_partitions(spec: ComponentSpec) -> int:
    if any(g.kind is GroupingKind.GLOBAL for g in spec.inputs):
        return 1
    return spec.parallelism
