"""Windowed bolts: aggregations over event-time windows, and top-N rankings per window.

Storm's windowed bolts (``BaseWindowedBolt``: tumbling and sliding, by time, with a lag
for late tuples) map onto Spark's ``window()`` with a watermark: a window's result is
emitted once, when the watermark passes its end (output mode ``append``), so a file sink
receives each window exactly once and state for closed windows is dropped. Rows later
than the watermark are dropped by Spark and counted (``late_rows`` in the metrics).
Count windows (every N tuples) have no Spark equivalent over a stream and are not offered.

``Window`` emits ``(window, *keys, *aggregates)``, ``window`` being Spark's struct of
``start`` and ``end``; ``TopN`` ranks a ``Window``'s rows within each window: the
rankings of storm-starter's ``RollingTopWords`` in one step where Storm needs
intermediate and total rankers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.components import Bolt, Fields, as_fields, require_fields
from pipeline.errors import TopologyError

#: The field a ``Window`` emits its bounds in (Spark's struct of ``start`` and ``end``).
WINDOW = "window"
_DURATION_UNITS = ("second", "minute", "hour", "day", "week", "millisecond", "microsecond")


def duration(text: str, what: str) -> str:
    words = str(text).split()
    ok = (
        len(words) == 2
        and words[0].isdigit()
        and int(words[0]) > 0
        and words[1].rstrip("s") in _DURATION_UNITS
    )
    if not ok:
        raise TopologyError(
            None, f"{what} must be a positive duration like '10 seconds' or '5 minutes', "
            f"got {text!r}"
        )  # fmt: skip
    return str(text)


class Window(Bolt):
    """Aggregate rows per event-time window (and per key): tumbling, or sliding by ``slide``.

    ``on`` is a timestamp field; ``watermark`` is how late a row may arrive and still
    count (Storm's lag). ``aggregates`` maps output fields to Spark SQL aggregate
    expressions, e.g. ``{"count": "count(*)", "total": "sum(value)", "mean":
    "avg(value)", "low": "min(value)", "high": "max(value)"}``.
    """

    stateful: ClassVar[bool] = True
    output_mode: ClassVar[str] = "append"

    def __init__(
        self,
        size: str,
        slide: str | None = None,
        *,
        on: str,
        watermark: str,
        keys: Sequence[str] = (),
        aggregates: Mapping[str, str] | None = None,
    ) -> None:
        self.size = duration(size, "Window size")
        self.slide = duration(slide, "Window slide") if slide is not None else None
        self.on = on
        self.watermark = duration(watermark, "Window watermark")
        self.keys = as_fields(keys, "Window keys")
        self.aggregates = dict(aggregates or {"count": "count(*)"})
        if not self.aggregates:
            raise TopologyError(None, "Window needs at least one aggregate")
        clash = {WINDOW, *self.keys} & set(self.aggregates)
        if clash:
            raise TopologyError(None, f"Window aggregate name {sorted(clash)[0]!r} is taken")

    def key_fields(self) -> Fields:
        return self.keys

    def output_fields(self, inputs: Fields) -> Fields:
        require_fields((self.on, *self.keys), inputs, "Window")
        if WINDOW in inputs:
            raise TopologyError(None, f"Window's input already has a {WINDOW!r} field")
        return as_fields((WINDOW, *self.keys, *self.aggregates), "Window output")

    def apply(self, frame: DataFrame) -> DataFrame:
        window = (
            F.window(self.on, self.size, self.slide) if self.slide else F.window(self.on, self.size)
        )
        grouped = frame.withWatermark(self.on, self.watermark).groupBy(
            window.alias(WINDOW), *self.keys
        )
        return grouped.agg(*(F.expr(e).alias(n) for n, e in self.aggregates.items()))


class TopN(Bolt):
    """The ``n`` rows with the largest ``by`` in each window of a ``Window``'s output.

    Ties are broken by the remaining fields, larger first, so the ranking is the same on
    every run. Emits the input's fields plus ``rank`` (1 = largest), once per window.
    """

    stateful: ClassVar[bool] = True
    output_mode: ClassVar[str] = "append"
    #: It ranks a Window's closed windows: the one stateful step allowed after another.
    follows_window: ClassVar[bool] = True

    def __init__(self, n: int, *, by: str, rank: str = "rank") -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TopologyError(None, f"TopN needs n >= 1, got {n!r}")
        self.n = n
        self.by = by
        self.rank = rank
        self._inputs: Fields = ()

    def key_fields(self) -> Fields:
        return (WINDOW,)

    def output_fields(self, inputs: Fields) -> Fields:
        if WINDOW not in inputs:
            raise TopologyError(
                None, f"TopN ranks within windows: its input must come from a Window "
                f"(a {WINDOW!r} field); it has {list(inputs)}"
            )  # fmt: skip
        require_fields((self.by,), inputs, "TopN")
        self._inputs = inputs
        return as_fields((*inputs, self.rank), "TopN output")

    def apply(self, frame: DataFrame) -> DataFrame:
        others = [f for f in frame.columns if f not in (WINDOW, self.by)]
        ranked = F.struct(F.col(self.by), *others)
        top = frame.groupBy(WINDOW).agg(
            F.slice(F.sort_array(F.collect_list(ranked), asc=False), 1, self.n).alias("_top")
        )
        exploded = top.select(WINDOW, F.posexplode("_top").alias("_pos", "_row"))
        return exploded.select(
            WINDOW,
            *(F.col(f"_row.{f}").alias(f) for f in frame.columns if f != WINDOW),
            (F.col("_pos") + 1).alias(self.rank),
        ).select(*frame.columns, self.rank)
