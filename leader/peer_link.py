"""A held TCP connection to the leader's address: its process's death, heard at once.

When a process dies, its kernel closes its sockets (FIN, or RST), even where the address
goes silent right after: a killed container's IP vanishes with it, so new connects time
out instead of being refused, and ``leader.preemption``'s "refused" evidence never comes.
A connection opened before the death hears it. A pause (SIGSTOP, a frozen cgroup) or a
partition closes nothing, so they still take the whole silence window P.

"Dead" here means: a connection we held to that address was closed by the other end, a
reconnect since has failed (refused, reset or timed out) and none has succeeded. A close
alone is not enough: a load balancer, a proxy, or the gRPC server itself (a raw connection
that never speaks HTTP/2) closes connections of live processes, and the reconnect that
follows succeeds. Even "dead" is no proof: a live leader behind a REJECT rule gives a
closed link and refused reconnects. It only shortens the silence window
(``leader.silence``), never acts alone: the beat must still have stopped for the leader's
whole claim, and the preemption is still fenced on the beat's version.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable

from cluster.threads import guarded_thread

log = logging.getLogger(__name__)

#: Seconds between connect attempts while nothing is held, and each attempt's bound.
RETRY = 0.1
CONNECT_TIMEOUT = 0.2
#: How often the loop looks at a change of address while it waits on a held connection.
TICK = 0.1


def connect(address: str, timeout: float) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)


class PeerLink:
    """Follows one address at a time (``follow``); ``dead(address)`` answers whether its
    held connection was closed by the peer and every reconnect since failed. ``on_change``
    is called (from the link's thread) whenever that answer changes."""

    def __init__(
        self,
        on_change: Callable[[], None],
        *,
        dead_after: float = 0.0,
        retry: float = RETRY,
        connector: Callable[[str, float], socket.socket] = connect,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_change = on_change
        self._dead_after = dead_after  # reconnects failing at least this long after the close
        self._retry = retry
        self._connect = connector
        self._clock = clock
        self._guard = threading.Lock()
        self._address: str | None = None
        self._closed_at: float | None = None  # for self._address: closed by its end
        self._dead = False  # and a reconnect failed since
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = guarded_thread("peer-link", self._run, self._stop)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def follow(self, address: str | None) -> None:
        with self._guard:
            if address == self._address:
                return
            self._address, self._closed_at, self._dead = address, None, False
        self._wake.set()

    def dead(self, address: str) -> bool:
        with self._guard:
            return self._address == address and self._dead

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        held: socket.socket | None = None
        held_for: str | None = None
        try:
            while not self._stop.is_set():
                with self._guard:
                    address = self._address
                if held is not None and held_for != address:
                    held.close()
                    held = held_for = None
                if address is None:
                    self._wake.wait(1.0)
                    self._wake.clear()
                    continue
                if held is None:
                    held = self._open(address)
                    held_for = address if held is not None else None
                    if held is None:
                        self._stop.wait(self._retry)
                    continue
                if self._peer_closed(held):
                    held.close()
                    held = held_for = None
                    self._mark(address, closed=True)
                    self._stop.wait(self._retry)  # a peer that accepts and drops: no spinning
        finally:
            if held is not None:
                held.close()

    def _open(self, address: str) -> socket.socket | None:
        try:
            sock = self._connect(address, CONNECT_TIMEOUT)
        except (OSError, ValueError):
            self._reconnect_failed(address)  # refused, silent or unreachable
            return None
        sock.setblocking(False)
        self._mark(address, closed=False)
        return sock

    def _peer_closed(self, sock: socket.socket) -> bool:
        """Wait up to a tick; True when the other end closed (EOF or reset). What the
        server sends (gRPC's SETTINGS frame) is read and dropped."""
        readable, _, _ = select.select([sock], [], [], TICK)
        if not readable:
            return False
        try:
            while sock.recv(65536):
                pass
            return True  # an empty read: FIN
        except BlockingIOError:
            return False  # drained, still open
        except OSError:
            return True  # reset

    def _mark(self, address: str, *, closed: bool) -> None:
        with self._guard:
            if self._address != address or (self._closed_at is not None) == closed:
                return
            self._closed_at = self._clock() if closed else None
            was_dead, self._dead = self._dead, False
        if closed:
            log.info("the connection to %s was closed by its end", address)
        if was_dead:
            self._on_change()

    def _reconnect_failed(self, address: str) -> None:
        """After a close, a reconnect that fails ``dead_after`` or more later makes the
        peer heard dead."""
        with self._guard:
            closed_at = self._closed_at
            if self._address != address or closed_at is None or self._dead:
                return
            if self._clock() - closed_at < self._dead_after:
                return
            self._dead = True
        log.info("%s closed our connection and refuses or ignores reconnects", address)
        self._on_change()
