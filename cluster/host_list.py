"""Making a kazoo client's next connection attempt use the host list just set.

kazoo resolves its host list once per pass (every address of every host, shuffled) and
walks that pass to its end before it reads the list again: ``set_hosts`` takes effect only
at the next pass. A connection dropped after ``set_hosts`` goes on to the next address of
the old pass. After a move off a server (``cluster.server_move``) that address may be the
stalled server the quorum probe left out, tried for T/n of the session; a bulk session
pinned to its election session's server (``cluster.session_pin``) may land anywhere.

``follow_host_list`` makes a changed list win at once: the first attempt after a change
walks a pass over the new list, and what was left of the old pass is skipped. kazoo has
no public hook for this; the per-address attempt of the client's connection handler is
wrapped, on that instance only. The handler looks the attempt up for each address, so
this holds on a started client too, from its next attempt on.
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.connection import STOP_CONNECTING

from cluster.errors import NimbusError

log = logging.getLogger(__name__)

_MARK = "_nimbus_follows_host_list"


class HostListHookError(NimbusError):
    """This kazoo's connection handler lacks the methods ``follow_host_list`` wraps."""


class _Passes:
    """The handler's passes over the host list, restarted whenever the list changes."""

    def __init__(self, client: KazooClient, connection: Any) -> None:
        self._client = client
        self._attempt = connection._connect_attempt
        self._expand = connection._expand_client_hosts
        # The list the pass under way (if any) was made from: a change replaces the object.
        self._source: object = client.hosts
        self._stale = False

    def expand(self) -> list[tuple[str, str, int]]:
        """A new pass: kazoo's expansion of the list as it is now."""
        self._source = self._client.hosts
        self._stale = False
        addresses: list[tuple[str, str, int]] = self._expand()
        return addresses

    def attempt(self, host: str, hostip: str, port: int, retry: Any) -> object:
        if self._stale:
            return None  # the rest of a pass the list changed under
        if self._client.hosts is self._source:
            return self._attempt(host, hostip, port, retry)
        while self._client.hosts is not self._source:
            for address in self.expand():
                if self._client._stopped.is_set():
                    return STOP_CONNECTING
                status = self._attempt(*address, retry)
                if status is STOP_CONNECTING:
                    return status
                if self._client.hosts is not self._source:
                    break  # changed again: a pass over the newest list
        # Every address of the new list was tried: end the old pass, kazoo backs off and
        # starts the next one from the current list.
        self._stale = True
        return None


def follow_host_list(client: KazooClient) -> None:
    """From ``client``'s next connection attempt on, a ``set_hosts`` decides where it
    goes; idempotent. ``HostListHookError`` when kazoo's internals are not the ones known."""
    connection = client._connection
    if getattr(connection, _MARK, False):
        return
    for name in ("_connect_attempt", "_expand_client_hosts"):
        if not callable(getattr(connection, name, None)):
            raise HostListHookError(
                f"kazoo's connection handler has no {name}: cannot make a move or a pin "
                "reach its server first (a kazoo version this project does not know)"
            )
    passes = _Passes(client, connection)
    connection._connect_attempt = passes.attempt
    connection._expand_client_hosts = passes.expand
    setattr(connection, _MARK, True)
