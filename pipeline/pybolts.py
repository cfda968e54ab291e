"""Bolts written in Python: functions over Arrow batches, or over one row at a time.

Python bolts run on Spark's Python workers through ``mapInArrow``: whole Arrow record
batches cross the JVM boundary, never single rows. ``Each`` still lets a user think in
tuples, at the cost of turning each batch into Python dicts and back (on this machine
roughly 10x the cost of an ``ArrowMap`` doing the same work on columns).

A bad row is a row on which the function raises. ``on_error=OnError.FAIL`` (the default)
fails the query, so the worker restarts and the error reaches ``describe``;
``OnError.SKIP`` drops the row and counts it. A skipping batch-wise bolt whose function
raises on a batch runs the function again row by row to find the bad rows. Counts travel
in a marker column (``SKIPPED``) that the compiler counts and drops, so they appear in
Spark's per-batch metrics without accumulators.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from pipeline.components import SKIPPED, Bolt, Fields, OnError, as_fields, ddl_field_names
from pipeline.errors import PipelineError, TopologyError

#: What an Arrow function may return: one batch, a table, or any number of batches.
ArrowOutput = Any
Schema = str | StructType


def _schema_fields(schema: Schema, what: str) -> Fields:
    if isinstance(schema, StructType):
        return as_fields(schema.fieldNames(), what)
    if not isinstance(schema, str):
        raise TopologyError(None, f"{what}: schema must be a DDL string or a StructType")
    return ddl_field_names(schema)


def _policy(on_error: OnError | str) -> OnError:
    try:
        return OnError(on_error)
    except ValueError:
        choices = [p.value for p in OnError]
        raise TopologyError(None, f"on_error must be one of {choices}, got {on_error!r}") from None


def _struct(frame: DataFrame, schema: Schema) -> StructType:
    """The output schema as a StructType (a DDL string is parsed by the session's Spark)."""
    if isinstance(schema, StructType):
        return schema
    return frame.sparkSession.createDataFrame([], schema).schema


def _with_marker(struct: StructType) -> StructType:
    return StructType([*struct.fields, StructField(SKIPPED, LongType(), True)])


def _as_batches(out: ArrowOutput) -> Iterator[Any]:
    if out is None:
        return
    if isinstance(out, pa.RecordBatch):
        yield out
    elif isinstance(out, pa.Table):
        yield from out.to_batches()
    elif isinstance(out, Iterable):
        for item in out:
            yield from _as_batches(item)
    else:
        raise TypeError(f"an Arrow bolt returned {type(out).__name__}, not Arrow batches")


class BoltFailed(PipelineError):
    """A Python bolt's function raised on a batch or row; names the component."""


class _Runner:
    """Runs on Spark's Python workers; module-level classes pickle by reference.

    ``process`` turns one input batch into output batches and raises on a bad one; with
    ``skip`` set, a failing batch is redone row by row and the bad rows are counted in a
    tally row (``SKIPPED`` > 0, every other column null) that the compiler drops.
    """

    def __init__(self, fn: Callable[[Any], Any], skip: bool, out: Any) -> None:
        self.fn = fn
        self.skip = skip
        self.out = out  # pyarrow schema of the output, with the marker column when skipping
        self.component = ""

    def named(self, component: str) -> _Runner:
        self.component = component
        return self

    def _failed(self, e: Exception) -> BoltFailed:
        return BoltFailed(f"bolt {self.component!r}: {type(e).__name__}: {e}")

    def process(self, batch: Any) -> list[Any]:
        return list(_as_batches(self.fn(batch)))

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            if not self.skip:
                try:
                    outs = self.process(batch)
                except Exception as e:
                    raise self._failed(e) from e
                yield from outs
                continue
            bad = 0
            try:
                outs = self.process(batch)
            except Exception:
                outs = []
                for i in range(batch.num_rows):
                    try:
                        outs.extend(self.process(batch.slice(i, 1)))
                    except Exception:
                        bad += 1
            for out in outs:
                yield self._marked(out, 0)
            if bad:
                tally: dict[str, list[int | None]] = {name: [None] for name in self.out.names}
                tally[SKIPPED] = [bad]
                yield pa.RecordBatch.from_pydict(tally, schema=self.out)

    def _marked(self, out: Any, skipped: int) -> Any:
        marker = pa.array([skipped] * out.num_rows, pa.int64())
        fields = [self.out.field(i) for i in range(len(self.out.names) - 1)]
        columns = [out.column(f.name).cast(f.type) for f in fields]
        return pa.RecordBatch.from_arrays([*columns, marker], schema=self.out)


class _OneToOne(_Runner):
    def process(self, batch: Any) -> list[Any]:
        outs = super().process(batch)
        rows = sum(out.num_rows for out in outs)
        if rows != batch.num_rows:
            raise ValueError(
                f"a map bolt must return one row per input row: got {rows} for "
                f"{batch.num_rows}; use ArrowFlatMap to change the row count"
            )
        return outs


class _Filter(_Runner):
    def process(self, batch: Any) -> list[Any]:
        return [batch.filter(self.fn(batch))]


class _PerRow(_Runner):
    def __init__(self, fn: Callable[[Any], Any], skip: bool, out: Any, names: Fields) -> None:
        super().__init__(fn, skip, out)
        self.names = names
        self.plain = out.remove(out.get_field_index(SKIPPED)) if skip else out

    def process(self, batch: Any) -> list[Any]:
        rows: list[dict[str, Any]] = []
        for row in batch.to_pylist():
            rows.extend(self._rows(self.fn(row)))
        return [pa.RecordBatch.from_pylist(rows, schema=self.plain)]

    def _rows(self, result: Any) -> Iterator[dict[str, Any]]:
        if result is None:
            return
        if isinstance(result, Mapping):
            yield dict(result)
        elif isinstance(result, tuple):
            if len(result) != len(self.names):
                raise ValueError(f"emitted {len(result)} values for fields {list(self.names)}")
            yield dict(zip(self.names, result, strict=True))
        elif isinstance(result, Iterable) and not isinstance(result, str | bytes):
            for item in result:
                if item is not None and not isinstance(item, Mapping | tuple):
                    raise TypeError(f"emitted a {type(item).__name__}; emit a dict or tuple")
                yield from self._rows(item)
        else:
            raise TypeError(f"returned a {type(result).__name__}; return a dict, tuple or list")


class _PythonBolt(Bolt):
    """Common to Python bolts: the output schema and the bad-row policy."""

    def __init__(self, fn: Callable[[Any], Any], schema: Schema | None, on_error: OnError) -> None:
        if not callable(fn):
            raise TopologyError(None, f"{type(self).__name__} needs a function, got {fn!r}")
        self.fn = fn
        self.schema = schema
        self.on_error = _policy(on_error)
        self._fields = _schema_fields(schema, type(self).__name__) if schema is not None else ()

    def output_fields(self, inputs: Fields) -> Fields:
        return self._fields

    def _runner(self, skip: bool, out: Any) -> _Runner:
        return _Runner(self.fn, skip, out)

    def apply(self, frame: DataFrame) -> DataFrame:
        struct = frame.schema if self.schema is None else _struct(frame, self.schema)
        skip = self.on_error is OnError.SKIP
        if skip:
            struct = _with_marker(struct)
        zone = frame.sparkSession.conf.get("spark.sql.session.timeZone")
        arrow = to_arrow_schema(struct, timezone=zone)
        return frame.mapInArrow(self._runner(skip, arrow).named(self.component), struct)


class ArrowFlatMap(_PythonBolt):
    """A Python function from one Arrow ``RecordBatch`` to any number of output rows.

    ``fn`` returns a ``RecordBatch``, a ``Table`` or an iterable of batches whose columns
    match ``schema`` (a DDL string like ``"word string"`` or a ``StructType``).
    """

    def __init__(
        self, fn: Callable[[Any], ArrowOutput], schema: Schema, *, on_error: OnError = OnError.FAIL
    ) -> None:
        super().__init__(fn, schema, on_error)


class ArrowMap(ArrowFlatMap):
    """Like ``ArrowFlatMap`` but one output row per input row (checked per batch)."""

    def _runner(self, skip: bool, out: Any) -> _Runner:
        return _OneToOne(self.fn, skip, out)


class ArrowFilter(_PythonBolt):
    """Keep the rows of each Arrow batch where ``fn(batch)`` (a boolean array) is true."""

    def __init__(self, fn: Callable[[Any], Any], *, on_error: OnError = OnError.FAIL) -> None:
        super().__init__(fn, None, on_error)

    def output_fields(self, inputs: Fields) -> Fields:
        return inputs

    def _runner(self, skip: bool, out: Any) -> _Runner:
        return _Filter(self.fn, skip, out)


class Each(_PythonBolt):
    """Storm's ``execute(tuple)``: ``fn(row)`` per input row, as a dict of its fields.

    ``fn`` returns None (emit nothing), a dict or a tuple in ``schema``'s field order (one
    row), or a list of those. Rows are converted batch-wise underneath; the conversion
    to Python objects and back costs about 10x an ``ArrowMap`` over columns, so prefer
    an SQL bolt or ``ArrowMap`` where throughput matters.
    """

    def __init__(
        self,
        fn: Callable[[dict[str, Any]], Any],
        schema: Schema,
        *,
        on_error: OnError = OnError.FAIL,
    ) -> None:
        super().__init__(fn, schema, on_error)

    def _runner(self, skip: bool, out: Any) -> _Runner:
        return _PerRow(self.fn, skip, out, self._fields)
