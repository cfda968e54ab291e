"""What a worker's queries have done, from Spark's progress reports: the heartbeat's figures.

Each micro-batch's report carries the rows read from the sources (``numInputRows``),
the rows each component emitted and skipped (``observedMetrics``, one entry per
component, see ``pipeline.compiler.observed``) and each stateful operator's partitions.
Counts are summed over the batches this process ran; a component that feeds several
sinks is counted once (the largest of its per-query counts, as each query runs it).

Reports are told apart by their timestamps, not their batch ids: an idle query reports
every 10 s under the id of the batch it will run next, and keying on the id made the
real batch look seen already, so its rows were never counted.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster.api import records
from pipeline.runner import TopologyRun

#: Rates are taken over this many seconds of reports.
RATE_WINDOW_S = 10.0


@dataclass
class Progress:
    """Counts of this process's micro-batches; ``update`` folds in new reports."""

    last_report: dict[str, str] = field(default_factory=dict)  # per sink, its timestamp
    batches: int = 0
    rows: int = 0
    last_batch_id: int = -1
    rows_by_sink: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped_by_sink: dict[str, dict[str, int]] = field(default_factory=dict)
    state_partitions: dict[str, int] = field(default_factory=dict)  # per stateful component
    late_rows: dict[str, int] = field(default_factory=dict)  # per stateful component
    samples: deque[tuple[float, int, dict[str, int]]] = field(default_factory=deque)

    def copy(self) -> Progress:
        return copy.deepcopy(self)

    def update(self, topology_run: TopologyRun, now: float) -> None:
        """Fold in the reports of batches not seen yet; ``now`` is a monotonic time."""
        for sink, query in topology_run.queries.items():
            seen = self.last_report.get(sink, "")
            for report in query.recentProgress:
                stamp = str(report.get("timestamp", ""))
                if stamp <= seen:
                    continue  # ISO-8601 UTC stamps of one format order as text
                seen = stamp
                rows = int(report.get("numInputRows", 0))
                if not rows and not report.get("observedMetrics"):
                    continue  # an idle report: no batch ran
                self.batches += 1
                self.rows += rows
                self.last_batch_id = max(self.last_batch_id, int(report.get("batchId", -1)))
                self._fold(sink, report, topology_run.stateful.get(sink))
            self.last_report[sink] = seen
        self.samples.append((now, self.rows, self.component_rows()))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW_S:
            self.samples.popleft()

    def _fold(self, sink: str, report: Any, stateful: str | None) -> None:
        rows = self.rows_by_sink.setdefault(sink, {})
        skipped = self.skipped_by_sink.setdefault(sink, {})
        for component, row in (report.get("observedMetrics") or {}).items():
            values = row.asDict() if hasattr(row, "asDict") else dict(row)
            rows[component] = rows.get(component, 0) + int(values.get("rows") or 0)
            if "skipped" in values:
                skipped[component] = skipped.get(component, 0) + int(values["skipped"] or 0)
        operators = report.get("stateOperators") or []
        if stateful and operators:
            partitions = operators[0].get("numShufflePartitions")
            if partitions:
                self.state_partitions[stateful] = int(partitions)
            late = sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in operators)
            self.late_rows[stateful] = self.late_rows.get(stateful, 0) + late

    def component_rows(self) -> dict[str, int]:
        return _merge(self.rows_by_sink)

    def rows_per_s(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, rows0, _), (t1, rows1, _) = self.samples[0], self.samples[-1]
        return (rows1 - rows0) / (t1 - t0) if t1 > t0 else 0.0

    def components(self, parallelism: Mapping[str, int]) -> list[records.ComponentMetrics]:
        """Per counted component, in the topology's order (``parallelism``'s keys); SQL
        bolts are not counted (``pipeline.compiler.observed`` says why)."""
        rows, skipped = self.component_rows(), _merge(self.skipped_by_sink)
        rates: dict[str, float] = {}
        if len(self.samples) >= 2:
            (t0, _, then), (t1, _, latest) = self.samples[0], self.samples[-1]
            if t1 > t0:
                rates = {c: (n - then.get(c, 0)) / (t1 - t0) for c, n in latest.items()}
        return [
            records.ComponentMetrics(
                component=name,
                rows=rows.get(name, 0),
                skipped_rows=skipped.get(name, 0),
                rows_per_s=round(rates.get(name, 0.0), 1),
                partitions=self.state_partitions.get(name, tasks),
                late_rows=self.late_rows.get(name, 0),
            )
            for name, tasks in parallelism.items()
            if name in rows or name in self.state_partitions
        ]


def _merge(by_sink: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for counts in by_sink.values():
        for component, n in counts.items():
            merged[component] = max(merged.get(component, 0), n)
    return merged
