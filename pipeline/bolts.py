"""Built-in bolts in the JVM: SQL expressions and running counts (Python ones: ``pybolts``).

Expressions compile to Spark SQL because it runs in the JVM at full speed: on this
machine a row UDF was 4x and a Python UDTF about 50x slower than the SQL split. An SQL
bolt has no bad-row policy: a row it cannot evaluate fails the query. Spark's ``try_``
functions (``try_element_at``, ``try_cast``, ``try_divide``) give NULL instead, which a
``Where`` can then drop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.components import Bolt, Fields, as_fields, require_fields
from pipeline.errors import TopologyError

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
