"""Keeping a replica's second (bulk-read) session on the server of its first.

A replica reads its records on a session of its own so that thousands of reads never
queue in front of the election session's requests. Two sessions on two servers could see
two histories at once: one server may lag the quorum by seconds, and a leader would then
act on records older than the state it has just written. On one server, both sessions
read the same history, so the view lags only by the watch events in flight. The pin
follows the election session: whenever it (re)connects, to another server or after a
``cluster.server_move``, the bulk session's host list becomes that server and, if it is
connected elsewhere, its connection is dropped, so kazoo reconnects it there with the same
session (``cluster.host_list``: at the first attempt).

``start`` comes before the bulk session's first connection: a move of the election
session at any point after it is followed, also while the bulk session is still
connecting (its first connection may then land on the old server: the pin looks again
whenever either session connects). ``pin_now`` may be called any number of times; it
drops a connection at most once, and only one on the wrong server.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.protocol.connection import _CONNECTION_DROP

from cluster.host_list import follow_host_list
from cluster.server_move import current_server

log = logging.getLogger(__name__)


def _bracketed(server: str) -> str:
    host, _, port = server.rpartition(":")
    return f"[{host}]:{port}" if ":" in host else server


class SessionPin:
    def __init__(self, lead: KazooClient, follower: KazooClient) -> None:
        self._lead = lead
        self._follower = follower
        follow_host_list(follower)
        self._chroot = follower.chroot or ""
        self._guard = threading.Lock()
        self._pinned: str | None = None
        self._dropped: object = None  # the follower's connection dropped last, once only

    def pin_now(self) -> str | None:
        """Point the follower at the lead's server, and drop its connection if it is on
        another one; returns that server, None when the lead is not connected."""
        server = current_server(self._lead)
        if server is None:
            return None
        with self._guard:
            if server != self._pinned:
                self._pinned = server
                self._follower.set_hosts(_bracketed(server) + self._chroot)
            there = current_server(self._follower)
            connection = getattr(self._follower._connection, "_socket", None)
            if there is None or there == server or connection is self._dropped:
                return server
            self._dropped = connection
            log.info("bulk-read session follows the election session from %s to %s", there, server)
            # Dropped, its connection loop reconnects to the one host it now has. Only
            # while connected: kazoo queues a request made while connecting, and would
            # drop the next connection with it.
            self._follower._call(_CONNECTION_DROP, self._follower.handler.async_result())
        return server

    def start(self) -> str | None:
        """Follow the lead from now on, and pin at once (see ``pin_now``)."""
        self._lead.add_listener(self._on_lead_state)
        self._follower.add_listener(self._on_follower_state)
        return self.pin_now()

    def stop(self) -> None:
        self._lead.remove_listener(self._on_lead_state)
        self._follower.remove_listener(self._on_follower_state)

    def _on_lead_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            # Not here: listeners run on kazoo's connection thread, before the socket the
            # lead's server is read from may be in place; a thread of the handler asks.
            self._lead.handler.spawn(self._pin_soon)

    def _on_follower_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:  # an attempt begun before the last pin landed
            self._follower.handler.spawn(self._pin_soon)

    def _pin_soon(self) -> None:
        try:
            self.pin_now()
        except Exception:  # a pin that failed leaves the old server: log, never die
            log.exception("could not move the bulk-read session to the election's server")
