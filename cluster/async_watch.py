"""Watches whose reads never block kazoo's event thread.

kazoo's ``DataWatch`` and ``ChildrenWatch`` read their node again *inside* the watch
callback, on the client's one event thread, and wait for the reply there: every watch
event behind it waits that round trip. A replica next in line whose predecessor's
deletion came right after a ``/leader-epoch`` change learnt that it had won only after
the leader cache's re-read of ``/leader-epoch`` (1.5-2.5 ms of a 9 ms graceful handover,
measured with bench/peers.py). These send the read with its watch and take the reply on
kazoo's completion thread; an event only sends the next read. ZooKeeper answers one
session's reads in order, so the replies, and the callbacks, come in the order of the
changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, WatchedEvent

log = logging.getLogger(__name__)


class _Watch:
    """Read ``path`` behind a watch, again on every event and on every reconnect."""

    children = False  # a listing, not the data

    def __init__(self, client: KazooClient, path: str, callback: Callable[..., object]) -> None:
        self._client, self.path, self._callback = client, path, callback
        self._stopped = threading.Event()

    def start(self) -> _Watch:
        self._client.add_listener(self._on_state)
        self._read()
        return self

    def stop(self) -> None:
        """No callback after this returns, save one whose reply is being handled."""
        self._stopped.set()
        self._client.remove_listener(self._on_state)

    def _send(self) -> IAsyncResult:
        read = self._client.get_children_async if self.children else self._client.get_async
        result: IAsyncResult = read(self.path, watch=self._fired)
        return result

    def _deliver(self, result: IAsyncResult) -> None:
        raise NotImplementedError

    def _read(self) -> None:
        if self._stopped.is_set():
            return
        try:
            self._send().rawlink(self._answered)
        except KazooException as e:  # not connected: the reconnect reads again
            log.debug("could not read %s: %s", self.path, e)

    def _fired(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:  # NONE: the connection went; ``_on_state`` reads
            self._read()  # kazoo's event thread: only a send, never a wait

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:  # a change missed while away is read now
            self._client.handler.spawn(self._read)  # not on the connection's own thread

    def _answered(self, result: IAsyncResult) -> None:
        if self._stopped.is_set():
            return
        try:
            self._deliver(result)
        except KazooException as e:  # the connection dropped: the reconnect reads again
            log.debug("reading %s failed: %s", self.path, e)
        except Exception:  # a callback's bug must not stop the watch, nor kazoo's thread
            log.exception("watch callback on %s failed", self.path)


class DataWatch(_Watch):
    """``callback(data, stat)`` with each version of ``path``; ``(None, None)`` while it
    does not exist (an exists-watch then waits for its creation)."""

    def _deliver(self, result: IAsyncResult) -> None:
        try:
            data, stat = result.get()
        except NoNodeError:
            self._client.exists_async(self.path, watch=self._fired).rawlink(self._existed)
            self._callback(None, None)
            return
        self._callback(data, stat)

    def _existed(self, result: IAsyncResult) -> None:
        """Created between the read and the exists-watch: its watch will not fire."""
        try:
            stat = result.get()
        except KazooException:
            return
        if stat is not None:
            self._read()


class ChildrenWatch(_Watch):
    """``callback(children)`` with each listing of ``path`` (which must exist)."""

    children = True

    def _deliver(self, result: IAsyncResult) -> None:
        try:
            children = result.get()
        except NoNodeError:
            log.warning("%s is gone: no longer watched", self.path)
            self.stop()
            return
        self._callback(list(children))
