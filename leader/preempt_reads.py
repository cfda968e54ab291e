"""The reads a silence preemption verifies and decides from, sent before the window ends.

One session's requests are answered in order, so a read waits behind our own beats in
flight: on a slow disk about two fsyncs (1.8 s at 0.9 s per fsync), which a failover paid
after the window, before its delete. Sent that long before the window's end, they are
answered when it ends. Nothing here is a safety check: the delete is fenced on the beat
version watched and on ``/leader-epoch`` in its own multi-op, so reads sent a little early
can only make it fail, never act on a stale view.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.interfaces import IAsyncResult

from cluster.paths import Paths

#: Never send them more than this before the window's end (the beats' latency memory can
#: hold a pause's long round trip).
LEAD_MAX = 5.0
#: Reads older than this many round trips (and 1 s) when the window ends are sent afresh.
FRESH_TRIPS = 4.0
#: How fast the remembered round trip forgets a long one (per acknowledged beat).
DECAY = 0.95


@dataclass(frozen=True)
class PreemptReads:
    """A sync and the reads behind it, all sent together (answered in order)."""

    target: str
    version: int
    sent_at: float
    synced: IAsyncResult
    beat: IAsyncResult
    epoch: IAsyncResult
    storms: IAsyncResult | None  # the code gate's "now", when we may take office too
    epochs: IAsyncResult | None  # the ``/epochs`` listing, likewise


def send_preempt_reads(
    client: KazooClient, paths: Paths, target: str, version: int, *, now: float, folding: bool
) -> PreemptReads:
    beat = paths.beat(target)
    return PreemptReads(
        target=target,
        version=version,
        sent_at=now,
        synced=client.sync_async(beat),
        beat=client.get_async(beat),
        epoch=client.get_async(paths.leader_epoch),
        storms=client.exists_async(paths.storms) if folding else None,
        epochs=client.get_children_async(paths.epochs) if folding else None,
    )


class ReadsAhead:
    """Our beats' round trip (from their acknowledgements, any thread) and at most one set
    of reads sent ahead for the (target, version) being watched (the watch's thread)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._trip = 0.0
        self._ahead: PreemptReads | None = None

    def beat_acked(self, sent: float, acked: float) -> None:
        with self._guard:
            self._trip = max(acked - sent, self._trip * DECAY)

    def lead(self) -> float:
        """How long before a window's end to send: two of our round trips, bounded."""
        with self._guard:
            return min(LEAD_MAX, 2 * self._trip)

    def due(self, target: str, version: int, window_end: float, now: float) -> bool:
        """Time to send the reads for ``target`` at ``version``, and not sent yet."""
        ahead = self._ahead
        if ahead is not None and (ahead.target, ahead.version) == (target, version):
            return False
        return window_end - now <= self.lead()

    def hold(self, reads: PreemptReads) -> None:
        self._ahead = reads

    def take(self, target: str, version: int, now: float) -> PreemptReads | None:
        """The reads sent ahead for ``target`` at ``version``, if fresh enough; once."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or (ahead.target, ahead.version) != (target, version):
            return None
        with self._guard:
            fresh = max(1.0, FRESH_TRIPS * self._trip)
        return ahead if now - ahead.sent_at <= fresh else None
