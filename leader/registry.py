"""The replica registry: this replica's own ephemeral ``<root>/nimbuses/<host:port>``.

Rewritten whenever the role, epoch or sync lag changes, and again on every new session
(an ephemeral node dies with the session that made it). Writes go through
``fencing.Membership``, which only touches our own node.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from cluster import __version__
from cluster.api import records
from cluster.paths import Paths
from cluster.threads import guarded_thread
from fencing import FencingError, Membership

log = logging.getLogger(__name__)


class Registry:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        *,
        start_time_ms: int,
        timeout: float,
        sync_lag: Callable[[], int] = lambda: 0,
    ) -> None:
        self._client = client
        self._path = paths.nimbus(replica_id)
        self._membership = Membership(client, replica_id, timeout=timeout)
        self._replica_id = replica_id
        self._start_time_ms = start_time_ms
        self._sync_lag = sync_lag
        self._is_leader = False
        self._epoch = 0
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread = guarded_thread("registry", self._run, self._stop)

    def start(self) -> None:
        self._client.add_listener(self._on_state)
        self._dirty.set()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        self._thread.join(timeout=5)
        self._client.remove_listener(self._on_state)
        try:
            self._membership.unregister(self._path)
        except (FencingError, KazooException) as e:
            log.info("could not remove %s on stop (it dies with the session): %s", self._path, e)

    def set_role(self, *, is_leader: bool, epoch: int) -> None:
        self._is_leader, self._epoch = is_leader, epoch
        self._dirty.set()

    def refresh(self) -> None:
        """The sync lag may have changed: rewrite the node."""
        self._dirty.set()

    def summary(self) -> records.NimbusSummary:
        return records.NimbusSummary(
            address=self._replica_id,
            role=records.LEADER if self._is_leader else records.FOLLOWER,
            is_leader=self._is_leader,
            epoch=self._epoch,
            version=__version__,
            start_time_ms=self._start_time_ms,
            code_sync_lag=self._sync_lag(),
        )

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._dirty.set()  # maybe a new session: our ephemeral node may be gone

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                self._membership.update(
                    self._path, self.summary().SerializeToString(deterministic=True)
                )
            except (FencingError, KazooException) as e:
                log.info("registry write failed (%s); retrying", e)
                self._stop.wait(0.2)
                self._dirty.set()
