"""Named streams and joins: one stream split by predicates, two streams joined on keys.

``Branch`` is Storm's ``declareStream`` plus ``emit(streamId, ...)`` (and the streams
API's ``branch``): each row goes to the first stream whose Spark SQL predicate holds
(rows matching none go to ``default`` if given, else nowhere), and consumers subscribe
with ``shuffle_grouping("branch", stream="errors")``. The stream travels as a tag
column, and each subscription is a filter on it in the JVM.

``Join`` is storm-starter's ``SingleJoinExample`` on Spark's stream-stream join: rows of
two inputs with equal key fields meet, inner or left outer. With ``within`` (and the two
inputs' event-time fields) a row only meets rows at most that far apart in time, and the
watermark lets Spark drop state that can no longer match; without it the join keeps
every row's state for ever, which only suits bounded inputs. A left outer join needs the
bound: its unmatched rows are emitted once the watermark proves no match can come.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.components import STREAM, Bolt, Fields, as_fields, require_fields
from pipeline.errors import TopologyError
from pipeline.windows import duration


class Branch(Bolt):
    """Route each row to the first named stream whose predicate holds.

    ``Branch({"errors": "level = 'ERROR'", "slow": "ms > 1000"}, default="rest")``.
    """

    sql: ClassVar[bool] = True

    def __init__(self, predicates: Mapping[str, str], *, default: str | None = None) -> None:
        if not predicates:
            raise TopologyError(None, "Branch needs at least one stream: {name: predicate}")
        self.predicates = dict(predicates)
        self.default = default
        names = [*self.predicates, *([default] if default else [])]
        self._streams = as_fields(names, "Branch streams")

    def streams(self) -> tuple[str, ...]:
        return self._streams

    def output_fields(self, inputs: Fields) -> Fields:
        return inputs

    def apply(self, frame: DataFrame) -> DataFrame:
        tag = None
        for name, predicate in self.predicates.items():
            tag = (F.when if tag is None else tag.when)(F.expr(predicate), F.lit(name))
        assert tag is not None
        tag = tag.otherwise(F.lit(self.default) if self.default else F.lit(None))
        return frame.withColumn(STREAM, tag).where(F.col(STREAM).isNotNull())


JoinKind = Literal["inner", "left"]


class Join(Bolt):
    """Join the streams of components ``left`` and ``right`` on equal ``on`` fields.

    Emits the keys, then the left input's other fields, then the right's; a non-key
    field both inputs have must be renamed first (a ``Select``). ``within`` bounds the
    time between matching rows' ``left_time`` and ``right_time`` fields; ``watermark``
    is how late a row may arrive on either side (both default to ``within``).
    """

    stateful: ClassVar[bool] = True
    output_mode: ClassVar[str] = "append"
    joins: ClassVar[bool] = True

    def __init__(
        self,
        left: str,
        right: str,
        *,
        on: Sequence[str],
        how: JoinKind = "inner",
        within: str | None = None,
        left_time: str | None = None,
        right_time: str | None = None,
        watermark: str | None = None,
    ) -> None:
        if how not in ("inner", "left"):
            raise TopologyError(None, f"Join how must be 'inner' or 'left', got {how!r}")
        if left == right:
            raise TopologyError(None, f"Join needs two different inputs, got {left!r} twice")
        self.left, self.right, self.how = left, right, how
        self.keys = as_fields(on, "Join on")
        if not self.keys:
            raise TopologyError(None, "Join needs at least one key field (on=...)")
        self.within = duration(within, "Join within") if within is not None else None
        self.watermark = duration(watermark, "Join watermark") if watermark else self.within
        self.left_time, self.right_time = left_time, right_time
        if self.within and not (left_time and right_time):
            raise TopologyError(None, "Join within= needs left_time= and right_time= fields")
        if how == "left" and not self.within:
            raise TopologyError(
                None, "a left outer join needs within=, left_time= and right_time=: Spark "
                "emits a row without a match only once the watermark rules one out"
            )  # fmt: skip

    def key_fields(self) -> Fields:
        return self.keys

    def output_fields(self, inputs: Fields) -> Fields:
        raise TopologyError(None, "a Join reads two inputs; the compiler calls join_fields")

    def join_fields(self, inputs: Mapping[str, Fields]) -> Fields:
        """The output fields given each input component's fields."""
        if set(inputs) != {self.left, self.right}:
            raise TopologyError(
                None, f"Join's inputs must be {self.left!r} and {self.right!r}, "
                f"got {sorted(inputs)}"
            )  # fmt: skip
        left, right = inputs[self.left], inputs[self.right]
        require_fields(self.keys, left, f"Join (left input {self.left!r})")
        require_fields(self.keys, right, f"Join (right input {self.right!r})")
        if self.left_time:
            require_fields((self.left_time,), left, f"Join (left input {self.left!r})")
        if self.right_time:
            require_fields((self.right_time,), right, f"Join (right input {self.right!r})")
        left_rest = [f for f in left if f not in self.keys]
        right_rest = [f for f in right if f not in self.keys]
        clash = sorted(set(left_rest) & set(right_rest))
        if clash:
            raise TopologyError(
                None, f"both inputs have field {clash[0]!r}; rename it on one side (a Select)"
            )
        return as_fields((*self.keys, *left_rest, *right_rest), "Join output")

    def apply(self, frame: DataFrame) -> DataFrame:
        raise TopologyError(None, "a Join reads two inputs; the compiler calls apply_join")

    def apply_join(self, frames: Mapping[str, DataFrame]) -> DataFrame:
        left, right = frames[self.left], frames[self.right]
        if self.watermark and self.left_time and self.right_time:
            left = left.withWatermark(self.left_time, self.watermark)
            right = right.withWatermark(self.right_time, self.watermark)
        lf, rf = left.alias("l"), right.alias("r")
        cond = [F.col(f"l.{k}") == F.col(f"r.{k}") for k in self.keys]
        if self.within:
            lt, rt = F.col(f"l.{self.left_time}"), F.col(f"r.{self.right_time}")
            bound = F.expr(f"INTERVAL {self.within}")
            cond += [rt >= lt - bound, rt <= lt + bound]
        joined = lf.join(rf, cond, "left_outer" if self.how == "left" else "inner")
        rest_l = [f for f in left.columns if f not in self.keys]
        rest_r = [f for f in right.columns if f not in self.keys]
        return joined.select(
            *(F.col(f"l.{k}").alias(k) for k in self.keys),
            *(F.col(f"l.{f}").alias(f) for f in rest_l),
            *(F.col(f"r.{f}").alias(f) for f in rest_r),
        )
