"""The heartbeat's figures from Spark's progress reports (pure logic, reports as Spark
writes them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.progress import Progress
from pipeline.runner import TopologyRun


class _Row(dict[str, int]):
    def asDict(self) -> dict[str, int]:
        return dict(self)


class _Query:
    def __init__(self, reports: Sequence[dict[str, Any]]) -> None:
        self.recentProgress = list(reports)


def _report(batch: int, second: int, rows: int, **observed: dict[str, int]) -> dict[str, Any]:
    return {
        "batchId": batch,
        "timestamp": f"2026-11-24T12:00:{second:02d}.000Z",
        "numInputRows": rows,
        "observedMetrics": {name: _Row(v) for name, v in observed.items()},
        "stateOperators": (
            [{"numShufflePartitions": 4, "numRowsDroppedByWatermark": 2}] if observed else []
        ),
    }


def _run(reports: Sequence[dict[str, Any]]) -> TopologyRun:
    return TopologyRun("t", {"out": _Query(reports)}, stateful={"out": "count"})  # type: ignore[dict-item]


def test_a_batch_after_an_idle_report_of_its_id_is_counted() -> None:
    # An idle query reports under the id of the batch it will run next: that batch's
    # rows were never counted when reports were keyed by id.
    idle = {"batchId": 1, "timestamp": "2026-11-24T12:00:10.000Z", "numInputRows": 0}
    first = _report(0, 0, 5, parse=dict(rows=4, skipped=1), count=dict(rows=3))
    second = _report(1, 20, 7, parse=dict(rows=7, skipped=0), count=dict(rows=2))
    progress = Progress()
    progress.update(_run([first, idle]), now=1.0)
    progress.update(_run([first, idle, second]), now=2.0)
    assert (progress.batches, progress.rows, progress.last_batch_id) == (2, 12, 1)
    by_name = {c.component: c for c in progress.components({"parse": 2, "count": 2})}
    assert (by_name["parse"].rows, by_name["parse"].skipped_rows) == (11, 1)
    assert by_name["count"].rows == 5
    assert by_name["count"].partitions == 4, "a stateful step's partitions are Spark's"
    assert by_name["parse"].partitions == 2
    assert by_name["count"].late_rows == 4, "rows dropped as late, summed over batches"


def test_rates_come_from_the_reports_of_the_window() -> None:
    progress = Progress()
    progress.update(_run([_report(0, 0, 10, parse=dict(rows=10))]), now=0.0)
    progress.update(
        _run([_report(0, 0, 10, parse=dict(rows=10)), _report(1, 5, 50, parse=dict(rows=40))]),
        now=5.0,
    )
    assert progress.rows_per_s() == 10.0
    (parse,) = progress.components({"parse": 1})
    assert parse.rows_per_s == 8.0
