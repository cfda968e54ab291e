"""Leader-only: worker failures that supervisors report become topology errors.

A supervisor puts why its worker last failed, and how many times it restarted it, in
the slot's heartbeat (``pipeline.failures``). Heartbeats go with their slot; the error
log stays: each failure not yet logged (a restart count above the one last logged for
that slot, or a message unlike the slot's newest logged error after a failover) is
appended to ``/errors/<topology-id>/worker`` through the fenced writer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths
from fencing import FencedWriter
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

    def record_new(self) -> list[str]:
        """Log every failure reported since the last pass; returns what was logged."""
        logged: list[str] = []
        for topology_id, slot, beat in self._failed_beats():
            key = (topology_id, slot)
            if beat.restarts <= self._logged.get(key, -1):
                continue
            message = f"{slot}: {beat.last_error} ({beat.restarts} restart(s))"
            newest = newest_error(self._client, self._paths, topology_id, COMPONENT)
            if key not in self._logged and newest is not None and newest.message == message:
                self._logged[key] = beat.restarts  # logged by an earlier leader
                continue
            error = records.ErrorInfo(
                component=COMPONENT, message=message, time_ms=self._wall_ms(), host=slot
            )
            append_error(self._client, self._paths, self._writer, topology_id, error)
            self._logged[key] = beat.restarts
            logged.append(f"{topology_id}: {message}")
        return logged

    def _failed_beats(self) -> list[tuple[str, str, records.WorkerHeartbeat]]:
        found: list[tuple[str, str, records.WorkerHeartbeat]] = []
        try:
            topology_ids = sorted(self._client.get_children(self._paths.workerbeats))
        except NoNodeError:
            return []
        for topology_id in topology_ids:
            try:
                slots = sorted(self._client.get_children(self._paths.workerbeats_of(topology_id)))
            except NoNodeError:
                continue
            for slot in slots:
                try:
                    data, _ = self._client.get(self._paths.workerbeat(topology_id, slot))
                    beat = records.WorkerHeartbeat.FromString(data)
                except (NoNodeError, DecodeError):
                    continue
                if beat.last_error and beat.restarts > 0:
                    found.append((topology_id, slot, beat))
        return found
