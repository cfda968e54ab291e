"""A watch-fed, in-memory copy of one folder of protobuf records (``/storms``, ...).

Leader duties and the code sync run every second; re-reading 10,000 records each time
would swamp ZooKeeper and slow the very first write after a failover. This cache reads
each record once (pipelined, asynchronously) and again only when its watch fires.

Any disconnect loses the watches, not only a new session: kazoo drops every watcher when
the connection goes (a NONE event) and does not restore them on reconnect (no
SetWatches). So after every reconnect the cache lists the folder and reads every record
again; a record whose read failed on the way keeps its last value until then. A listing
or a read that fails while the connection is up (or came back before the failure was
seen: its reconnect event is already gone) is tried again after a backoff of 2 s at most,
so no failure waits for a reconnect that may never come and the view never freezes.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

from google.protobuf.message import DecodeError, Message
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, WatchedEvent

log = logging.getLogger(__name__)

#: Record reads in flight at once: enough to pipeline, few enough that others get through.
LOAD_WINDOW = 256
#: Backoff of a listing or read that failed while connected: first, and at most.
RETRY_FIRST, RETRY_MAX = 0.1, 2.0

M = TypeVar("M", bound=Message)


class FolderView(NamedTuple):
    """The cache's listing of its folder, and whether it has read every record in it.

    Whether the listing is current is not in here: a caller reads the folder's stat (one
    small round trip) and compares its ``cversion``; the same number means the children
    are exactly these, without listing 10,000 of them.
    """

    children: frozenset[str]
    cversion: int  # the folder's child version ``children`` reflect (-1: never listed)
    records_read: bool  # every child's record read once, and no read failed since


class RecordCache(Generic[M]):
    def __init__(self, client: KazooClient, folder: str, parse: Callable[[bytes], M]) -> None:
        self._client = client
        self._folder = folder
        self._parse = parse
        self._guard = threading.Lock()
        self._records: dict[str, tuple[M, int]] = {}
        self._children: set[str] = set()
        self._pending = 0
        self._loaded = threading.Condition(self._guard)
        self._watches_lost = False  # a disconnect since the last full reload
        self._failed: set[str] = set()  # reads that failed on a dropped connection
        self._listeners: list[Callable[[], None]] = []
        self._record_listeners: list[Callable[[M], None]] = []
        self._cversion = -1  # the folder's child version our ``_children`` reflect
        self._relist = False  # a listing failed on a connection that then came back
        self._listed_once = False  # the folder's first listing answered (records may follow)
        # Reads wait here and at most LOAD_WINDOW are in flight: 10,000 reads queued at
        # once would sit ahead of every other request of the process (a new leader's
        # take-office multi-op among them) for seconds.
        self._to_load: collections.deque[str] = collections.deque()
        self._in_flight = 0
        self._held_back = False  # ``hold_back``: queue reads, send none
        self._retry_delay = RETRY_FIRST  # grows while listings keep failing
        self._retry_timer: threading.Timer | None = None

    def start(self) -> None:
        self._client.add_listener(self._on_state)
        self._watch_children()

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Called after any record changes (from kazoo's event thread; must not block)."""
        self._listeners.append(callback)

    def add_record_listener(self, callback: Callable[[M], None]) -> None:
        """Called with each record as it is read (kazoo's event thread; must be quick)."""
        self._record_listeners.append(callback)

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``add_listener`` for a while: returns the function that removes it again."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    # -- queries -----------------------------------------------------------------------

    def items(self) -> dict[str, M]:
        with self._guard:
            return {name: record for name, (record, _) in self._records.items()}

    def versioned_items(self) -> dict[str, tuple[M, int]]:
        """Each record with the znode version it was read at, from one snapshot: a writer
        that acts on a record can check, in its multi-op, that it is still that version."""
        with self._guard:
            return dict(self._records)

    def get(self, name: str) -> M | None:
        with self._guard:
            entry = self._records.get(name)
        return entry[0] if entry else None

    def names(self) -> set[str]:
        with self._guard:
            return set(self._children)

    def snapshot(self) -> FolderView:
        with self._guard:
            records_read = self._pending == 0 and not self._failed
            return FolderView(frozenset(self._children), self._cversion, records_read)

    def hold_back(self, hold: bool) -> None:
        """Stop sending queued reads (True) until released (False).

        For a replica that wins leadership while still loading: its take-office round trips
        then wait behind nothing, and the CPU is theirs; the load resumes after.
        """
        with self._guard:
            self._held_back = hold
        if not hold:
            self._pump()

    def wait_loaded(self, timeout: float) -> bool:
        """Block until the folder was listed and every child in it has been read once.

        Not only "nothing pending": before the first listing answers nothing is, and a
        caller would go on with an empty view (a replica starting at 10,000 topologies then
        read them one by one in its code gate: seconds instead of one pipelined load).
        """
        with self._loaded:
            return self._loaded.wait_for(lambda: self._listed_once and self._pending == 0, timeout)

    # -- watch plumbing (kazoo's threads) -------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._watches_lost = True
        elif state == KazooState.CONNECTED and (self._watches_lost or self._relist):
            self._watches_lost = self._relist = False
            # None of our watches survived: list the folder and read every record again.
            # Not here: listeners run on kazoo's connection thread, the one that drains
            # the request queue's wake-up socket; thousands of requests sent from it
            # would fill that socket and block the thread for good.
            self._client.handler.spawn(self._reload)

    def _reload(self) -> None:
        self._watch_children()
        names = self.names()
        with self._guard:
            self._pending += len(names)
            self._to_load.extend(names)
        self._pump()

    def _watch_children(self) -> None:
        """List the folder and leave a child watch; the watch re-lists (and re-arms)."""
        result = self._client.get_children_async(
            self._folder, watch=self._on_children_event, include_data=True
        )
        result.rawlink(self._listed)

    def _on_children_event(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE:
            return  # a connection-state event; the session listener handles those
        self._watch_children()

    def _listed(self, result: IAsyncResult) -> None:
        try:
            children, stat = result.get_nowait()
        except NoNodeError:
            log.warning("%s does not exist; watching for it", self._folder)
            self._client.exists_async(self._folder, watch=self._on_children_event)
            with self._guard:
                self._listed_once = True  # no folder: nothing to load
                self._loaded.notify_all()
            return
        except Exception as e:  # list again once connected, or after a backoff if we are
            log.warning("could not list %s: %r", self._folder, e)
            self._relist = True
            self._retry_soon()
            return
        with self._guard:
            self._retry_delay = RETRY_FIRST
        self._on_children(list(children), int(stat.cversion))

    def _retry_soon(self) -> None:
        """Reload after a backoff when connected now: no reconnect event will ask for it."""
        if self._client.state != KazooState.CONNECTED:
            return  # the reconnect's listener reloads
        with self._guard:
            if self._retry_timer is not None:
                return  # one is pending; it clears this as it starts
            delay, self._retry_delay = self._retry_delay, min(RETRY_MAX, self._retry_delay * 2)
            self._retry_timer = threading.Timer(delay, self._retry)
            self._retry_timer.daemon = True
            self._retry_timer.start()

    def _retry(self) -> None:
        with self._guard:
            self._retry_timer = None  # a failure answered from here on schedules anew
        if self._client.state != KazooState.CONNECTED:
            return
        try:
            if self._relist:
                self._relist = False
                self._watch_children()
            with self._guard:
                failed = sorted(self._failed & self._children)
            for name in failed:  # only what failed: not 10,000 reads for one
                self._load(name)
        except Exception:  # a timer thread dies silently: log, and try again later
            log.exception("record cache retry of %s failed", self._folder)
            self._relist = True
            self._retry_soon()

    def _on_children(self, children: list[str], cversion: int) -> None:
        current = set(children)
        with self._guard:
            if cversion < self._cversion:
                return  # an older listing answered late
            self._cversion = cversion
            added = current - self._children
            removed = self._children - current
            self._children = current
            for name in removed:
                self._records.pop(name, None)
                self._failed.discard(name)
            self._pending += len(added)  # counted before any read can answer
            self._to_load.extend(added)
            self._listed_once = True
            self._loaded.notify_all()
        self._pump()
        if removed:
            self._notify()

    def _load(self, name: str) -> None:
        with self._guard:
            self._pending += 1
            self._to_load.append(name)
        self._pump()

    def _pump(self) -> None:
        """Send queued reads while fewer than ``LOAD_WINDOW`` are in flight."""
        while True:
            with self._guard:
                if not self._to_load or self._in_flight >= LOAD_WINDOW or self._held_back:
                    return
                name = self._to_load.popleft()
                self._in_flight += 1
            result = self._client.get_async(f"{self._folder}/{name}", watch=self._on_node)
            result.rawlink(lambda r, n=name: self._loaded_one(n, r))

    def _loaded_one(self, name: str, result: IAsyncResult) -> None:
        failed = False
        try:
            data, stat = result.get_nowait()
            record: M | None = self._parse(data)
        except NoNodeError:
            record = None
        except DecodeError:
            log.warning("skipping damaged record %s/%s", self._folder, name)
            record = None
        except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as e:
            # Unknown, not gone: the reload after reconnecting reads it again.
            log.info("could not read %s/%s: %s", self._folder, name, type(e).__name__)
            record, failed = None, True
        except Exception as e:  # e.g. not allowed to read it: as good as absent here
            log.warning("cannot read %s/%s: %r", self._folder, name, e)
            record = None
        with self._guard:
            if failed:
                # Unknown is not gone: a leader duty that took a missing record for a
                # removed topology would delete its assignment. Keep the last value.
                self._failed.add(name)
            elif record is not None and name in self._children:
                self._records[name] = (record, int(stat.version))
                self._failed.discard(name)
            else:
                self._records.pop(name, None)
                self._failed.discard(name)
            self._pending -= 1
            self._in_flight -= 1
            settled = self._pending == 0
            self._loaded.notify_all()
        self._pump()
        if failed:
            self._retry_soon()
        if record is not None:
            for seen in self._record_listeners:
                try:
                    seen(record)
                except Exception:
                    log.exception("record listener failed")
        if settled:  # one notification for a bulk load, not one per record
            self._notify()

    def _on_node(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE:
            return  # the connection dropped (no path); the reload after it re-arms
        name = event.path.rsplit("/", 1)[-1]
        if event.type == EventType.DELETED:
            with self._guard:
                self._records.pop(name, None)
            self._notify()
        elif event.type in (EventType.CHANGED, EventType.CREATED):
            self._load(name)

    def _notify(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("record cache listener failed")
