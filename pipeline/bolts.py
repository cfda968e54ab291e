"""Built-in bolts: SQL expressions, Python functions over Arrow batches, running counts.

Expressions compile to Spark SQL because it runs in the JVM at full speed; Python
functions see whole Arrow record batches (``mapInArrow``), never one row at a time: on
this machine a row UDF was 4x and a Python UDTF about 50x slower than the SQL split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipeline.components import Bolt, Fields, as_fields, ddl_field_names, require_fields
from pipeline.errors import TopologyError

#: What an Arrow function may return: one batch, a table, or any number of batches.
ArrowOutput = Any
Schema = str | StructType


def _schema_fields(schema: Schema, what: str) -> Fields:
    if isinstance(schema, StructType):
        return as_fields(schema.fieldNames(), what)
    if not isinstance(schema, str):
        raise TopologyError(None, f"{what}: schema must be a DDL string or a StructType")
    return ddl_field_names(schema)


# ----------------------------------------------------------------------------- SQL bolts


class Split(Bolt):
    """Split a text field by a regular expression into one row per non-empty piece.

    ``keep`` carries other input fields along (before ``into``). The pattern is a Java
    regular expression (Spark's ``split``); with ``lower`` the text is lower-cased first.
    """

    sql: ClassVar[bool] = True

    def __init__(
        self,
        field: str,
        into: str = "word",
        *,
        pattern: str = r"\s+",
        lower: bool = False,
        keep: Sequence[str] = (),
    ) -> None:
        self.field = field
        self.into = into
        self.pattern = pattern
        self.lower = lower
        self.keep = as_fields(keep, "Split keep")

    def output_fields(self, inputs: Fields) -> Fields:
        require_fields((self.field, *self.keep), inputs, "Split")
        return as_fields((*self.keep, self.into), "Split output")

    def apply(self, frame: DataFrame) -> DataFrame:
        text = F.col(self.field)
        if self.lower:
            text = F.lower(text)
        pieces = F.explode(F.split(text, self.pattern)).alias(self.into)
        return frame.select(*self.keep, pieces).where(F.col(self.into) != "")


class Where(Bolt):
    """Keep the rows for which a Spark SQL predicate holds, e.g. ``"length(word) > 3"``."""

    sql: ClassVar[bool] = True

    def __init__(self, predicate: str) -> None:
        self.predicate = predicate

    def output_fields(self, inputs: Fields) -> Fields:
        return inputs

    def apply(self, frame: DataFrame) -> DataFrame:
        return frame.where(F.expr(self.predicate))


class Select(Bolt):
    """Project Spark SQL expressions to named fields: ``Select(word="lower(word)")``.

    Names are given, not parsed from the expressions, so the output fields are known
    without Spark.
    """

    sql: ClassVar[bool] = True

    def __init__(self, exprs: Mapping[str, str] | None = None, /, **named: str) -> None:
        merged = {**(exprs or {}), **named}
        if not merged:
            raise TopologyError(None, "Select needs at least one field=expression")
        self.exprs = dict(merged)
        self._fields = as_fields(tuple(merged), "Select")

    def output_fields(self, inputs: Fields) -> Fields:
        return self._fields

    def apply(self, frame: DataFrame) -> DataFrame:
        return frame.select(*(F.expr(e).alias(n) for n, e in self.exprs.items()))


# --------------------------------------------------------------------- Python Arrow bolts


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


class _FlatMapper:
    """Runs on Spark's Python workers; a class at module level so it pickles by reference."""

    def __init__(self, fn: Callable[[Any], ArrowOutput]) -> None:
        self.fn = fn

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            yield from _as_batches(self.fn(batch))


class _Mapper(_FlatMapper):
    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            rows = 0
            for out in _as_batches(self.fn(batch)):
                rows += out.num_rows
                yield out
            if rows != batch.num_rows:
                raise ValueError(
                    f"a map bolt must return one row per input row: got {rows} for "
                    f"{batch.num_rows}; use ArrowFlatMap to change the row count"
                )


class _Filterer(_FlatMapper):
    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            yield batch.filter(self.fn(batch))


class ArrowFlatMap(Bolt):
    """A Python function from one Arrow ``RecordBatch`` to any number of output rows.

    ``fn`` returns a ``RecordBatch``, a ``Table`` or an iterable of batches whose columns
    match ``schema`` (a DDL string like ``"word string"`` or a ``StructType``).
    """

    def __init__(self, fn: Callable[[Any], ArrowOutput], schema: Schema) -> None:
        self.fn = fn
        self.schema = schema
        self._fields = _schema_fields(schema, type(self).__name__)

    def output_fields(self, inputs: Fields) -> Fields:
        return self._fields

    def _runner(self) -> _FlatMapper:
        return _FlatMapper(self.fn)

    def apply(self, frame: DataFrame) -> DataFrame:
        return frame.mapInArrow(self._runner(), self.schema)


class ArrowMap(ArrowFlatMap):
    """Like ``ArrowFlatMap`` but one output row per input row (checked per batch)."""

    def _runner(self) -> _FlatMapper:
        return _Mapper(self.fn)


class ArrowFilter(Bolt):
    """Keep the rows of each Arrow batch where ``fn(batch)`` (a boolean array) is true."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def output_fields(self, inputs: Fields) -> Fields:
        return inputs

    def apply(self, frame: DataFrame) -> DataFrame:
        return frame.mapInArrow(_Filterer(self.fn), frame.schema)


# -------------------------------------------------------------------------- stateful bolts


class RunningCount(Bolt):
    """A running count per key on Spark's streaming aggregation (state in the checkpoint).

    Emits ``(*keys, into)`` rows for the keys whose count changed in a micro-batch
    (output mode ``update``). Its input must be grouped by fields among its keys (or
    globally), as in Storm, so each key's state lives in exactly one task.
    """

    stateful: ClassVar[bool] = True

    def __init__(self, *keys: str, into: str = "count") -> None:
        if not keys:
            raise TopologyError(None, "RunningCount needs at least one key field")
        self.keys = as_fields(keys, "RunningCount keys")
        self.into = into

    def key_fields(self) -> Fields:
        return self.keys

    def output_fields(self, inputs: Fields) -> Fields:
        require_fields(self.keys, inputs, "RunningCount")
        return as_fields((*self.keys, self.into), "RunningCount output")

    def apply(self, frame: DataFrame) -> DataFrame:
        counted = frame.groupBy(*self.keys).count()
        return counted if self.into == "count" else counted.withColumnRenamed("count", self.into)
