"""Leader-only: worker failures that supervisors report become topology errors.

A supervisor puts why its worker last failed, and how many times it restarted it, in
the slot's heartbeat (``pipeline.failures``). Heartbeats go with their slot; the error
log stays: each failure not yet logged (a restart count above the one last logged for
that slot, or a message unlike the slot's newest logged error after a failover) is
appended to ``/errors/<topology-id>/worker`` through the fenced writer. The scheduler
hands over the heartbeats its pass has read anyway, so this reads none itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from fencing import FencedWriter, WriteConflictError
from fencing.error_log import append_error, newest_error

log = logging.getLogger(__name__)

COMPONENT = "worker"


class FailureLog:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        writer: FencedWriter,
        *,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._client = client
        self._paths = paths
        self._writer = writer
        self._wall_ms = wall_ms
        self._logged: dict[tuple[str, str], int] = {}  # (topology id, slot) -> restarts

    def record_new(self, beats: Iterable[tuple[str, str, records.WorkerHeartbeat]]) -> list[str]:
        """Log every failure reported since the last pass, from (topology id, slot name,
        heartbeat); returns what was logged. A write that conflicts is retried next pass."""
        logged: list[str] = []
        for topology_id, slot, beat in beats:
            key = (topology_id, slot)
            if not beat.last_error or beat.restarts <= self._logged.get(key, 0):
                continue
            message = f"{slot}: {beat.last_error} ({beat.restarts} restart(s))"
            newest = newest_error(self._client, self._paths, topology_id, COMPONENT)
            if key not in self._logged and newest is not None and newest.message == message:
                self._logged[key] = beat.restarts  # logged by an earlier leader
                continue
            error = records.ErrorInfo(
                component=COMPONENT, message=message, time_ms=self._wall_ms(), host=slot
            )
            try:
                append_error(self._client, self._paths, self._writer, topology_id, error)
            except WriteConflictError as e:  # the topology went meanwhile, say
                log.info("could not log a failure of %s yet: %s", topology_id, e)
                continue
            self._logged[key] = beat.restarts
            logged.append(f"{topology_id}: {message}")
        return logged
