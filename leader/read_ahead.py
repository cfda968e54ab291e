"""The winner's reads, sent right behind the lock queue's listing: a handover costs the
lock's own round trips and the take-office multi-op, not a round trip per read between.

Safe because ZooKeeper answers one session's requests in the order sent: reads queued
after the listing that shows our node first are answered from a state at least as new as
that listing. By then every node ahead of ours is gone (nodes only join behind), so no
fenced write of an earlier term can land after them: they are as fresh as reads sent after
``acquire`` returned. The code gate after winning (``/storms``), ``step_aside``
(``/handover``, ``/leader-epoch``) and ``take_office`` decide from them; the multi-op still
checks everything it was decided from.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.retry import ForceRetryError
from kazoo.interfaces import IAsyncResult
from kazoo.recipe.lock import Lock

from cluster.paths import Paths
from fencing.office import OfficeReads, send_office_reads


@dataclass(frozen=True)
class WinnerReads:
    """Sent together: the stat of ``/storms`` (the code gate's "now"), ``/handover`` and
    take-office's reads (whose ``/leader-epoch`` ``step_aside`` reads too)."""

    storms: IAsyncResult
    handover: IAsyncResult
    office: OfficeReads


def send_winner_reads(client: KazooClient, paths: Paths, lock_node: str) -> WinnerReads:
    return WinnerReads(
        storms=client.exists_async(paths.storms),
        handover=client.get_async(paths.handover),
        office=send_office_reads(client, paths, paths.beat(lock_node)),
    )


class ReadAheadLock(Lock):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's ``Lock`` on the lock queue whose every listing is followed at once, in the
    same session, by the winner's reads; ``reads`` holds the last ones sent, which are
    those behind the winning listing once ``acquire`` returns True."""

    def __init__(self, client: KazooClient, paths: Paths, identifier: str) -> None:
        super().__init__(client, paths.leader_lock, identifier=identifier)
        self._paths = paths
        self.reads: WinnerReads | None = None

    def _get_predecessor(self, node: str) -> str | None:
        """kazoo's (2.10-2.11), but the listing is sent without waiting and the reads go
        out behind it; the predecessor is found from the listing as kazoo does."""
        listing = self.client.get_children_async(self.path)
        self.reads = send_winner_reads(self.client, self._paths, self._paths.lock_node(node))
        children = listing.get()
        sequence = node[len(self.prefix) :]
        ahead = []
        found_self = False
        for child in children:
            match = self._contenders_re.search(child)
            if match is not None and match.group(1) < sequence:
                ahead.append(match)
            if child == node:
                found_self = True
        if not found_self:  # our node went with a session kazoo recovered from: kazoo retries
            raise ForceRetryError()
        if not ahead:
            return None
        predecessor: str = max(ahead, key=lambda m: m.groups()).string
        return predecessor
