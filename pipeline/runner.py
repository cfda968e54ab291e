"""Start a compiled topology's streaming queries and stop them between micro-batches.

Stopping waits (bounded) until no trigger is active, so a micro-batch is not cut in
half: with a ``foreachBatch`` sink that halves the work replayed on the next start. With
back-to-back batches the engine may never look idle; the wait then ends at its timeout
and the query is stopped anyway, which is safe because the checkpoint replays the batch.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from pyspark.errors import PySparkException
from pyspark.errors.exceptions.captured import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from pipeline.compiler import CompiledQuery, compile_topology
from pipeline.errors import PipelineRunError
from pipeline.graph import Topology
from pipeline.lineage import checkpoint_lineage
from pipeline.sinks import FileSink
from pipeline.state_partitions import align

log = logging.getLogger(__name__)

Trigger = Literal["available_now", "continuous"]
_POLL = 0.02
# spark.sql.shuffle.partitions is session-wide; hold it steady while a query captures it.
_CONF_LOCK = threading.Lock()


class TopologyRun:
    """The running queries of one topology, one per sink (see ``run``)."""

    def __init__(
        self,
        name: str,
        queries: Mapping[str, StreamingQuery],
        notes: Mapping[str, str] | None = None,
        stateful: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.queries = dict(queries)
        #: Per sink, why its stateful step does not run with the partitions asked for.
        self.notes = dict(notes or {})
        #: Per sink, the stateful bolt on its path (its state operator in the progress).
        self.stateful = dict(stateful or {})
        #: Per stateful bolt, its state partitions as its checkpoint has them at start.
        self.state_partitions: dict[str, int] = {}

    @property
    def is_active(self) -> bool:
        return any(q.isActive for q in self.queries.values())

    def progress(self) -> dict[str, dict[str, Any] | None]:
        """The last progress report of each sink's query (Spark's JSON as a dict)."""
        return {sink: q.lastProgress for sink, q in self.queries.items()}

    def exception(self) -> PipelineRunError | None:
        """The first failure of any query, or None."""
        for sink, q in self.queries.items():
            err = q.exception()
            if err is not None:
                failure = PipelineRunError(f"{self.name}: query for sink {sink!r} failed: {err}")
                failure.__cause__ = err
                return failure
        return None

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until every query ends; False on timeout. Raises if a query failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for sink, q in self.queries.items():
            try:
                if deadline is None:
                    q.awaitTermination()
                elif not q.awaitTermination(max(1, math.ceil(deadline - time.monotonic()))):
                    return False
            except StreamingQueryException as e:
                raise PipelineRunError(f"{self.name}: query for sink {sink!r} failed: {e}") from e
        return True

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every query, each between micro-batches if one turns idle within ``timeout``.

        Returns True if every query was idle when stopped. Raises if a query had failed.
        """
        deadline = time.monotonic() + timeout
        all_idle = True
        for sink, q in self.queries.items():
            idle = _wait_idle(q, deadline)
            if not idle:
                log.warning("%s: sink %r still in a micro-batch; stopping anyway", self.name, sink)
            all_idle = all_idle and idle
            try:
                q.stop()
            except PySparkException as e:
                raise PipelineRunError(f"{self.name}: could not stop sink {sink!r}: {e}") from e
        failure = self.exception()
        if failure is not None:
            raise failure
        return all_idle

    def __enter__(self) -> TopologyRun:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.is_active:
            self.stop()


def _wait_idle(query: StreamingQuery, deadline: float) -> bool:
    while True:
        if not query.isActive:
            return True
        if not query.status.get("isTriggerActive", False):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)


def run(
    topology: Topology,
    spark: SparkSession,
    checkpoint_dir: str | Path,
    *,
    trigger: Trigger = "available_now",
    interval: float = 0.0,
    name: str = "topology",
    checkpoints: Mapping[str, str | Path] | None = None,
) -> TopologyRun:
    """Compile ``topology`` and start one query per sink, checkpointed under ``checkpoint_dir``.

    ``available_now`` processes everything the spouts hold at start, then the queries end
    (``await_termination``). ``continuous`` runs micro-batches back to back, or every
    ``interval`` seconds, until ``stop``; it is not Spark's experimental continuous
    processing, which supports neither aggregations nor ``foreachBatch``.
    Sink ``s`` keeps its checkpoint in ``checkpoints[s]`` when given, else in
    ``checkpoint_dir/s``: restart with the same folder to resume with nothing lost and
    nothing counted twice at an idempotent sink. A file sink is told its checkpoint's
    lineage (``pipeline.lineage``), so it refuses batches another checkpoint published.
    """
    if trigger not in ("available_now", "continuous"):
        raise PipelineRunError(f"trigger must be 'available_now' or 'continuous', not {trigger!r}")
    compiled = compile_topology(topology, spark)
    root = Path(checkpoint_dir)
    where = {sink: Path(path) for sink, path in (checkpoints or {}).items()}
    started: dict[str, StreamingQuery] = {}
    notes: dict[str, str] = {}
    partitions: dict[str, int] = {}
    try:
        for cq in compiled:
            checkpoint = where.get(cq.sink_name, root / cq.sink_name)
            if isinstance(cq.sink, FileSink):
                cq.sink.lineage = checkpoint_lineage(checkpoint)
            if cq.state_partitions is not None:
                # A rebalance may have changed the stateful step's parallelism since the
                # checkpoint was made: its state is repartitioned before the query starts.
                aligned = align(spark, checkpoint, cq.state_partitions)
                if aligned.note:
                    notes[cq.sink_name] = aligned.note
                if cq.stateful:
                    partitions[cq.stateful] = aligned.partitions or cq.state_partitions
            started[cq.sink_name] = _start(cq, spark, checkpoint, trigger, interval, name)
    except BaseException:
        for q in started.values():
            q.stop()
        raise
    stateful = {cq.sink_name: cq.stateful for cq in compiled if cq.stateful}
    topology_run = TopologyRun(name, started, notes, stateful)
    topology_run.state_partitions = partitions
    return topology_run


def _start(
    cq: CompiledQuery,
    spark: SparkSession,
    checkpoint: Path,
    trigger: Trigger,
    interval: float,
    name: str,
) -> StreamingQuery:
    writer = (
        cq.sink.writer(cq.frame)
        .outputMode(cq.output_mode)
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"{name}.{cq.sink_name}")
    )
    if trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{max(0.0, interval)} seconds")
    with _CONF_LOCK:
        key = "spark.sql.shuffle.partitions"
        before = spark.conf.get(key)
        try:
            if cq.state_partitions is not None:
                # Captured by the query at start, then fixed by its checkpoint for good.
                spark.conf.set(key, str(cq.state_partitions))
            return writer.start()
        except PySparkException as e:
            raise PipelineRunError(f"{name}: could not start sink {cq.sink_name!r}: {e}") from e
        finally:
            if before is not None:
                spark.conf.set(key, before)
