"""Whether a topology's query should run, and with what parallelism.

Storm pauses the spouts of an INACTIVE topology and keeps its workers; here the worker
keeps its process, its Spark session and its claim, and stops the query between
micro-batches until the topology is activated again (then it resumes from the checkpoint).
A rebalance changes the record's component parallelism: the worker restarts its query
from the checkpoint with the new partitioning.
"""

from __future__ import annotations

import logging
import threading

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from cluster.api import records

log = logging.getLogger(__name__)


class Activity:
    """Follows ``/storms/<topology-id>`` by watch; ``active`` is set unless INACTIVE or
    KILLED."""

    def __init__(self, client: KazooClient, storm_path: str) -> None:
        self.active = threading.Event()
        self.active.set()
        self._lock = threading.Lock()
        self._parallelism: dict[str, int] = {}
        DataWatch(client, storm_path, self._on_data)

    def parallelism(self) -> dict[str, int]:
        """The component parallelism the record asks for (after any rebalance)."""
        with self._lock:
            return dict(self._parallelism)

    def _on_data(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        if data is None:
            return  # a removed topology loses its assignment: the claim sees to that
        try:
            base = records.StormBase.FromString(data)
        except DecodeError:
            log.warning("ignoring a damaged topology record")
            return
        with self._lock:
            self._parallelism = dict(base.component_parallelism)
        status = base.status
        # A killed topology is deactivated for its kill's wait (Storm's ``kill -w``): the
        # worker keeps its claim, stops its query, and goes when the assignment does.
        if status in (records.INACTIVE, records.KILLED):
            self.active.clear()
        else:
            self.active.set()
