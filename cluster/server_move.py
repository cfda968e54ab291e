"""Leaving a ZooKeeper server that is behind its quorum, keeping the session.

ZooKeeper promises a client a view current "within tens of seconds", and some faults break
even that: a server cut from its peers and healed can keep sessions and ephemeral nodes
the quorum no longer has (ZOOKEEPER-4837, -5010), and a replica reading from it waits
behind lock nodes nobody holds, for ever. Storm shipped the same hole (STORM-1115). Given
evidence that its server is behind (the caller's: a node it reads after a sync that the
quorum says does not exist), a replica moves: the other servers become the client's host
list and the connection is dropped, so kazoo reconnects elsewhere with the same session id
and password, and the session, its watches' paths and its own lock node survive. The
suspect is left out for ``quarantine`` seconds, then the full list is back for later
reconnects. At most one move per ``min_interval`` (P): a wrong accusation costs one
reconnect, never a storm of them. Given a ``probe``, only servers that open a new session
at once (``cluster.quorum_probe``: they reach their quorum and have seen our zxid) are
moved to; none answering means the whole ensemble stalls, and the replica stays. A caller
that accuses its server of being slow (a beat held) gives the probe its own deadline, and
an ``unless``: asked once a server answered, it calls the move off (our server answered
meanwhile: it was no slower than the one probed, the ensemble is slow).

kazoo has no public "reconnect elsewhere": the drop uses its own test hook
(``_CONNECTION_DROP``), and the current server is read from its connection's socket. Left
alone, kazoo would go on from the drop to the next address of the list it expanded before
the move, the suspect's other neighbour whatever the probe said; ``cluster.host_list``
makes the first attempt after the move go to a server of the new list.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.protocol.connection import _CONNECTION_DROP

from cluster.host_list import follow_host_list
from cluster.quorum_probe import Probe

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Move:
    suspect: str  # host:port of the server left
    others: tuple[str, ...]  # the hosts the client reconnects to
    why: str


def current_server(client: KazooClient) -> str | None:
    """host:port of the ZooKeeper server ``client`` is connected to, None when not."""
    if client.state != KazooState.CONNECTED:
        return None
    sock = getattr(client._connection, "_socket", None)  # kazoo keeps no public address
    if sock is None:
        return None
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return None
    return f"{host}:{port}"


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _addresses(host: str, port: int) -> set[str]:
    try:
        infos = socket.getaddrinfo(host, port, 0, 0, socket.IPPROTO_TCP)
    except socket.gaierror:
        return set()
    return {f"{info[4][0]!s}:{int(info[4][1])}" for info in infos}


class ServerMover:
    def __init__(
        self,
        client: KazooClient,
        *,
        min_interval: float,
        quarantine: float,
        on_move: Callable[[Move], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe: Probe | None = None,
    ) -> None:
        self._client = client
        follow_host_list(client)
        self._hosts: list[tuple[str, int]] = list(client.hosts)
        self._chroot = client.chroot or ""
        self._min_interval = min_interval
        self._quarantine = quarantine
        self._on_move = on_move
        self._clock = clock
        self._probe = probe
        self._guard = threading.Lock()
        self._last: float | None = None
        self._restore: threading.Timer | None = None
        self.moves: list[Move] = []

    def move(
        self,
        why: str,
        *,
        probe_timeout: float | None = None,
        unless: Callable[[], bool] | None = None,
    ) -> Move | None:
        """Leave the current server, blaming ``why``; None when refused (too soon after
        the last move, not connected, no other server, none answering the probe within
        ``probe_timeout`` (None: the probe's own), or ``unless()`` once one did)."""
        with self._guard:
            now = self._clock()
            if self._last is not None and now - self._last < self._min_interval:
                log.info("not leaving our ZooKeeper server again so soon (%s)", why)
                return None
            server = current_server(self._client)
            if server is None:
                return None
            others = [
                (host, port) for host, port in self._hosts if server not in _addresses(host, port)
            ]
            if not others or len(others) == len(self._hosts):
                log.warning(
                    "our ZooKeeper server %s looks behind its quorum (%s), but there is "
                    "no other server to move to",
                    server,
                    why,
                )
                return None
            if self._probe is not None:
                others = self._probe(others, probe_timeout)
                if not others:
                    log.warning(
                        "our ZooKeeper server %s looks behind its quorum (%s), but no other "
                        "server opens a session either: the ensemble stalls; staying",
                        server,
                        why,
                    )
                    return None
            if unless is not None and unless():
                log.info("staying on ZooKeeper server %s after all (%s)", server, why)
                return None
            self._last = now
            move = Move(server, tuple(_host_port(h, p) for h, p in others), why)
            self._client.set_hosts(",".join(move.others) + self._chroot)
            self._schedule_restore()
            self.moves.append(move)
        log.warning(
            "leaving ZooKeeper server %s, which looks behind its quorum (%s); reconnecting "
            "to %s with the same session",
            move.suspect,
            why,
            ", ".join(move.others),
        )
        # Dropped, the connection loop's next attempt goes to a host of the new list
        # (``follow_host_list``), session kept.
        self._client._call(_CONNECTION_DROP, self._client.handler.async_result())
        if self._on_move is not None:
            self._on_move(move)
        return move

    def stop(self) -> None:
        with self._guard:
            if self._restore is not None:
                self._restore.cancel()

    def _schedule_restore(self) -> None:
        if self._restore is not None:
            self._restore.cancel()
        full = ",".join(_host_port(h, p) for h, p in self._hosts) + self._chroot

        def restore() -> None:
            try:
                self._client.set_hosts(full)
            except Exception:  # a closed client: nothing to restore
                log.exception("restoring the ZooKeeper host list")

        self._restore = threading.Timer(self._quarantine, restore)
        self._restore.daemon = True
        self._restore.start()
