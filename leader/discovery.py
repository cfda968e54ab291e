"""The leader cache: who leads and who is there, fed by watches, read from memory.

The leader is the holder named in ``<root>/leader-epoch`` while that holder's lock node
still exists. The lowest lock node alone is not enough: it may belong to a winner that
is still checking its code, or that failed the gate. gRPC answers come from here, with
no ZooKeeper read per call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

from cluster.api import records
from cluster.async_watch import ChildrenWatch, DataWatch
from cluster.paths import Paths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderInfo:
    address: str  # host:port, the replica id
    epoch: int
    lock_node: str
    since_ms: int

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


def lock_sequence(name: str) -> int:
    """The sequence number of a lock node name (``<uuid>__lock__<10 digits>``)."""
    tail = name[-10:]
    return int(tail) if tail.isdigit() else -1


class LeaderCache:
    """Watch-fed view of ``/leader-epoch``, the lock queue and ``/nimbuses``."""

    def __init__(self, client: KazooClient, paths: Paths) -> None:
        self._client = client
        self._paths = paths
        self._guard = threading.Lock()
        self._changed = threading.Condition()  # its own lock: predicates read under _guard
        self._epoch_record: records.LeaderEpoch | None = None
        # The highest epoch ever read: a view behind it (a new session on a server that
        # lags) is never reported; the leader is "not known" until the view catches up.
        self._highest_epoch = 0
        self._lock_children: frozenset[str] = frozenset()
        self._nimbuses: dict[str, records.NimbusSummary] = {}
        self._sessions: dict[str, int] = {}  # address -> the session that registered it
        self._watched_nimbuses: set[str] = set()
        self._listeners: list[Callable[[], None]] = []

    def start(self) -> None:
        # Watches that never wait on kazoo's event thread (cluster.async_watch): the
        # elector's own watches (the node ahead going) are not held up behind our reads.
        DataWatch(self._client, self._paths.leader_epoch, self._on_epoch).start()
        ChildrenWatch(self._client, self._paths.leader_lock, self._on_lock_children).start()
        ChildrenWatch(self._client, self._paths.nimbuses, self._on_nimbus_children).start()

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Called (without arguments) after every change, from kazoo's event thread."""
        self._listeners.append(callback)

    # -- queries ------------------------------------------------------------------------

    def leader(self) -> LeaderInfo | None:
        with self._guard:
            return self._leader_locked()

    def lock_queue(self) -> list[str]:
        """The lock queue's node names, first (the holder) first, from the watch."""
        with self._guard:
            children = list(self._lock_children)
        return sorted(children, key=lock_sequence)

    def nimbus_session(self, address: str) -> int | None:
        """The session whose ephemeral ``/nimbuses/<address>`` node is there now."""
        with self._guard:
            return self._sessions.get(address)

    def nimbuses(self) -> dict[str, records.NimbusSummary]:
        with self._guard:
            return dict(self._nimbuses)

    def wait_for(self, predicate: Callable[[LeaderCache], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds after a change (or now); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def _leader_locked(self) -> LeaderInfo | None:
        record = self._epoch_record
        if record is None or not record.lock_node:
            return None
        if record.lock_node.rsplit("/", 1)[-1] not in self._lock_children:
            return None
        return LeaderInfo(record.holder, record.epoch, record.lock_node, record.since_ms)

    # -- watch callbacks (kazoo's event thread) -------------------------------------------

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("leader cache listener failed")

    def _on_epoch(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        record: records.LeaderEpoch | None = None
        if data:
            try:
                record = records.LeaderEpoch.FromString(data)
            except DecodeError:
                log.warning("ignoring a damaged %s record", self._paths.leader_epoch)
        with self._guard:
            if record is not None and record.epoch < self._highest_epoch:
                log.warning(
                    "%s read at epoch %d, behind epoch %d read before (a server that lags): "
                    "the leader is not known until the view catches up",
                    self._paths.leader_epoch,
                    record.epoch,
                    self._highest_epoch,
                )
                record = None
            elif record is not None:
                self._highest_epoch = record.epoch
            self._epoch_record = record
        self._notify()

    def _on_lock_children(self, children: list[str]) -> None:
        with self._guard:
            self._lock_children = frozenset(children)
        self._notify()

    def _on_nimbus_children(self, children: list[str]) -> None:
        with self._guard:
            gone = self._watched_nimbuses - set(children)
            for name in gone:
                self._nimbuses.pop(name, None)
                self._sessions.pop(name, None)
            self._watched_nimbuses -= gone
            new = set(children) - self._watched_nimbuses
            self._watched_nimbuses |= new
        for name in new:
            self._watch_nimbus(name)  # only sends a read: fine on kazoo's threads
        self._notify()

    def _watch_nimbus(self, name: str) -> None:
        watch: DataWatch | None = None

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            with self._guard:
                if name not in self._watched_nimbuses:
                    self._nimbuses.pop(name, None)
                    self._sessions.pop(name, None)
                    if watch is not None:
                        watch.stop()  # a replica that left
                    return
                if data is None or stat is None:
                    self._nimbuses.pop(name, None)
                    self._sessions.pop(name, None)
                else:
                    self._sessions[name] = int(stat.ephemeralOwner)
                    try:
                        self._nimbuses[name] = records.NimbusSummary.FromString(data)
                    except DecodeError:
                        log.warning("ignoring a damaged record for replica %s", name)
            self._notify()

        watch = DataWatch(self._client, self._paths.nimbus(name), on_data)
        watch.start()
