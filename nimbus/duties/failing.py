"""Topologies that are not doing their work, counted by the reason a user already sees.

``worker``: a topology whose workers are scheduled (ACTIVE, INACTIVE, REBALANCING) and one
of whose slots' heartbeats reports ``FAILING_AFTER`` failures in a row without a committed
batch in between: exactly what ``nimbus list`` shows as "(failing)" and the UI as failing.
``code_missing``: a topology in status CODE_MISSING, whose code no live replica holds, so
no worker can run it. A killed topology counts for neither, whatever its last heartbeats
said. The leader's scheduler counts each pass from the records and heartbeats it read
anyway, so the figure costs no read of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cluster.api import records
from nimbus.duties.planning import SCHEDULED
from pipeline.failures import slot_failures

WORKER = "worker"
CODE_MISSING = "code_missing"
#: Every reason, each exported even at 0 (an alert on a series that never existed waits).
REASONS = (WORKER, CODE_MISSING)


def count_failing(
    storms: Mapping[str, records.StormBase],
    beats: Mapping[str, Iterable[records.WorkerHeartbeat]],
) -> dict[str, int]:
    """Reason -> topologies failing for it; ``beats`` holds each topology's slot heartbeats."""
    counts = dict.fromkeys(REASONS, 0)
    for tid, base in storms.items():
        if base.status == records.CODE_MISSING:
            counts[CODE_MISSING] += 1
        elif base.status in SCHEDULED and slot_failures(beats.get(tid, ())).failing:
            counts[WORKER] += 1
    return counts
