"""Records as the CLI's ``--json`` and the web UI both show them: one shape for both."""

from __future__ import annotations

from typing import Any

from cluster.api import records


def component_metrics(c: records.ComponentMetrics) -> dict[str, Any]:
    """One component's counts from a worker heartbeat."""
    return {
        "component": c.component,
        "rows": c.rows,
        "skipped_rows": c.skipped_rows,
        "rows_per_s": round(c.rows_per_s, 1),
        "partitions": c.partitions,
        "late_rows": c.late_rows,
    }
