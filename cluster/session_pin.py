"""Keeping a replica's second (bulk-read) session on the server of its first.

A replica reads its records on a session of its own so that thousands of reads never
queue in front of the election session's requests. Two sessions on two servers could see
two histories at once: one server may lag the quorum by seconds, and a leader would then
act on records older than the state it has just written. On one server, both sessions
read the same history, so the view lags only by the watch events in flight. The pin
follows the election session: whenever it (re)connects, to another server or after a
``cluster.server_move``, the bulk session's host list becomes that server and its
connection is dropped, so kazoo reconnects it there with the same session.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.protocol.connection import _CONNECTION_DROP

from cluster.server_move import current_server

log = logging.getLogger(__name__)


def _bracketed(server: str) -> str:
    host, _, port = server.rpartition(":")
    return f"[{host}]:{port}" if ":" in host else server


class SessionPin:
    def __init__(self, lead: KazooClient, follower: KazooClient) -> None:
        self._lead = lead
        self._follower = follower
        self._chroot = follower.chroot or ""
        self._guard = threading.Lock()
        self._pinned: str | None = None

    def pin_now(self) -> str | None:
        """Point the follower at the lead's server (before the follower starts, or after
        the lead moved); returns that server, None when the lead is not connected."""
        server = current_server(self._lead)
        if server is None:
            return None
        with self._guard:
            if server == self._pinned:
                return server
            moved = self._pinned is not None
            self._pinned = server
        self._follower.set_hosts(_bracketed(server) + self._chroot)
        if moved and self._follower.state != KazooState.LOST:
            log.info("bulk-read session follows the election session to %s", server)
            # Dropped, its connection loop reconnects to the one host it now has.
            self._follower._call(_CONNECTION_DROP, self._follower.handler.async_result())
        return server

    def start(self) -> None:
        self._lead.add_listener(self._on_state)

    def stop(self) -> None:
        self._lead.remove_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            # Not here: listeners run on kazoo's connection thread, before the socket the
            # lead's server is read from may be in place; a thread of the handler asks.
            self._lead.handler.spawn(self._pin_soon)

    def _pin_soon(self) -> None:
        try:
            self.pin_now()
        except Exception:  # a pin that failed leaves the old server: log, never die
            log.exception("could not move the bulk-read session to the election's server")
