"""A replica's two leases and what renews them (DESIGN items 5 and 8).

The read lease: our last round trip to ZooKeeper started less than 2/3 T ago (renewed by
``fencing.lease.Heartbeat``); it serves freshness and readiness. The claim: one of our
acknowledged beats was *sent* less than the claim it announced ago (renewed by the
``Beater``, ``leader.beat_lease``). A leader claims, and writes, only while both hold.
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.interfaces import IAsyncResult

from fencing.lease import Heartbeat, Lease
from leader.heartbeat import Beater, BeatListener
from leader.settings import ElectorSettings


class Pulse:
    def __init__(
        self,
        client: KazooClient,
        settings: ElectorSettings,
        *,
        own_node: Callable[[], str | None],
        on_lock_gone: Callable[[str], None],
        clock: Callable[[], float],
        probe: Callable[[], IAsyncResult] | None = None,
    ) -> None:
        self._clock = clock
        self.lease = Lease(settings.session_timeout * 2 / 3, clock=clock)
        self.claim = Lease(settings.beats.leader_lease, clock=clock)
        self._heartbeat = Heartbeat(
            client, self.lease, path=settings.paths.root, interval=settings.session_timeout / 6,
            clock=clock,
        )  # fmt: skip
        self._beater = Beater(
            client, settings.paths, settings.replica_id, own_node=own_node, lease=self.claim,
            interval=settings.beats.interval, timeout=settings.session_timeout,
            on_lock_gone=on_lock_gone, clock=clock, probe=probe,
        )  # fmt: skip

    def start(self) -> None:
        self._heartbeat.start()
        self._beater.start()

    def stop(self) -> None:
        self._beater.stop()
        self._heartbeat.stop()

    def valid(self) -> bool:
        """Both leases hold: we may claim leadership."""
        return self.claim.valid() and self.lease.valid()

    def expire(self) -> None:
        """The connection dropped: neither lease holds until renewed."""
        self.lease.expire()
        self.claim.expire()

    def announce(self) -> tuple[float, float, bytes]:
        """For the term's first beat (the take-office multi-op): its send time, the claim
        it announces and its beat node data; ``renew`` once it is acknowledged."""
        sent = self._clock()
        lease, beat = self._beater.announce()
        return sent, lease, beat

    def beat_made(self, lock_node: str) -> bool:
        return self._beater.made(lock_node)

    def renew(self, sent: float, lease: float) -> None:
        """A beat written elsewhere, sent at ``sent`` announcing ``lease``, was acknowledged."""
        self.claim.renew(sent, lease)

    def renew_now(self) -> None:
        """Renew both leases at once (a resumed term: they lapsed with the connection)."""
        self._heartbeat.beat()
        self._beater.beat_now(wait=max(self.claim.duration, 3 * self._beater.latency()))

    def latency(self) -> float:
        return self._beater.latency()

    def on_beat(self, listener: BeatListener) -> None:
        self._beater.add_listener(listener)

    def on_stall(self, after: Callable[[], float], callback: Callable[[float], object]) -> None:
        self._beater.on_stall(after, callback)
