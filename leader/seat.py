"""Where the elector stands: its place in the lock queue and its term (``Seat``), and its
connection to ZooKeeper as the cycle sees it (``Link``).

Both are read from other threads (the beater asks for our lock node, kazoo's listener
cancels the token, ``stop`` hands over), so each keeps its state behind its own guard.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent
from kazoo.recipe.lock import Lock

from cluster.paths import Paths
from fencing import FencingError, LeadershipToken
from fencing.beats import leave_queue
from fencing.office import leader_epoch_of

log = logging.getLogger(__name__)


class Seat:
    """Our kazoo ``Lock`` (while queued or leading) and our term's token."""

    def __init__(self, client: KazooClient, paths: Paths, *, release_timeout: float) -> None:
        self._client = client
        self._paths = paths
        self._timeout = release_timeout
        self._guard = threading.Lock()
        self._lock: Lock | None = None
        self._token: LeadershipToken | None = None

    def take(self, lock: Lock, stopping: threading.Event) -> bool:
        """Hold ``lock`` as ours, unless we are stopping (checked under the guard, so
        ``stop`` either sees the lock or the lock is never queued)."""
        with self._guard:
            if stopping.is_set():
                return False
            self._lock = lock
            return True

    def begin(self, token: LeadershipToken) -> None:
        """A term starts: from now on a disconnect or ``stop`` cancels ``token``."""
        with self._guard:
            self._token = token

    @property
    def token(self) -> LeadershipToken | None:
        return self._token

    def held(self) -> tuple[LeadershipToken | None, Lock | None]:
        """The token and the lock, read together."""
        with self._guard:
            return self._token, self._lock

    def lock_node(self) -> str | None:
        """Our lock node's path while queued or leading."""
        with self._guard:
            lock = self._lock
        return None if lock is None else self._paths.lock_node_of(lock)

    def release(self, lock: Lock | None, then: Callable[[], object] | None = None) -> None:
        """Leave the queue within a deadline (``leave_lock``; ``then`` as there)."""
        if lock is None:
            return
        leave_lock(self._client, self._paths, lock, timeout=self._timeout, then=then)
        self._drop(lock)

    def forget(self, lock: Lock) -> None:
        """Drop ``lock`` without deleting its node (kazoo's release would block until the
        link is back); the next cycle drops the node first if the session survived."""
        lock.is_acquired = False
        self._drop(lock)

    def _drop(self, lock: Lock) -> None:
        with self._guard:
            if self._lock is lock:
                self._lock = None


class Link:
    """CONNECTED or not, and the session of the current (or, while disconnected, the last)
    connection. ``on_lost(state)`` runs on kazoo's listener thread and must not block."""

    def __init__(self, client: KazooClient, on_lost: Callable[[str], None]) -> None:
        self._client = client
        self._on_lost = on_lost
        self._connected = threading.Event()
        self.session: int | None = None  # captured on CONNECTED (see ``_on_state``)

    def start(self) -> None:
        self._client.add_listener(self._on_state)
        if self._client.state == KazooState.CONNECTED:
            self._on_state(KazooState.CONNECTED)

    def stop(self) -> None:
        self._client.remove_listener(self._on_state)

    def connected(self) -> bool:
        return self._connected.is_set()

    def wait(self, stopping: threading.Event) -> bool:
        """Wait until connected: True then, False once ``stopping`` is set."""
        while not stopping.is_set():
            if self._connected.wait(0.2):
                return True
        return False

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            # Read here, once per connection: kazoo's client_id is None while
            # disconnected, which must never read as "the session changed".
            client_id = self._client.client_id
            if client_id:
                self.session = int(client_id[0])
            self._connected.set()
            return
        self._connected.clear()
        self._on_lost(state)


def leave_lock(
    client: KazooClient,
    paths: Paths,
    lock: Lock,
    *,
    timeout: float,
    then: Callable[[], object] | None = None,
) -> None:
    """Delete our lock node within ``timeout`` and forget it; also drops a lock whose node
    is already gone (kazoo would keep believing it holds it). Not kazoo's ``release``: it
    retries without bound while the link is down, and SIGTERM would hang on it."""
    node = paths.lock_node_of(lock)
    if node is not None and client.state == KazooState.CONNECTED:
        try:
            leave_queue(client, lock_node=node, timeout=timeout, then=then)
        except (KazooException, FencingError) as e:
            # The session's end removes the node, and a later cycle drops it if the
            # session survives (``Membership.drop_session_nodes``).
            log.warning("could not release lock node %s: %s", node, e)
    elif node is not None:
        log.info("not connected: leaving lock node %s to the session", node)
    lock.is_acquired = False
    lock.node = None


class Successor:
    """A stopping leader's view of its successor's take-office, so that our teardown (its
    writes, our sessions' close, its CPU), which on a small machine competes with that
    take-office, waits for it. Made right after our lock node's delete is sent (``then``
    of ``leave_lock``): its listing of the queue and its watched read of ``/leader-epoch``
    go out behind the delete, not ahead of it."""

    def __init__(self, client: KazooClient, paths: Paths, lock_node: str) -> None:
        self.took = threading.Event()
        self._paths, self._lock_node = paths, lock_node
        self._queue = client.get_children_async(paths.leader_lock)
        self._epoch = client.get_async(paths.leader_epoch, watch=self._changed)

    def _changed(self, _: WatchedEvent) -> None:
        self.took.set()

    def wait(self, timeout: float) -> bool:
        """Up to ``timeout`` for ``/leader-epoch`` to name another lock node than ours, if
        anyone is queued; True once it does (False at once with nobody queued, or the
        queue unread)."""
        try:
            queue = self._queue.get(timeout=timeout)
            self._epoch.get(timeout=timeout)  # sent behind the listing: answered by now
        except (KazooException, KazooTimeoutError):  # no term on record, or no answer
            return False
        if all(self._paths.lock_node(name) == self._lock_node for name in queue):
            return False
        current, _ = leader_epoch_of(self._epoch)
        if current is not None and current.lock_node != self._lock_node:
            return True  # taken already: before our read was answered
        return self.took.wait(timeout)
