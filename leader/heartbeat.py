"""The beater: every H, one beat of our own lock node, pipelined.

A beat does not wait for the reply of the one before: under a slow ZooKeeper (an fsync of
0.45-2 s) the beats keep arriving, and each carries the claim its sender announces for it,
which grows with the latency the beats observe (``leader.beat_lease``). An acknowledged
beat renews the claim lease from the time it was *sent*, for what it announced, and is
reported to listeners (the silence watch counts our own beats).

Beats stay in flight only so long (``PIPELINE_FLOOR``, or three times the latency
remembered, if longer): a replica whose replies are lost (its requests still reach
ZooKeeper) soon stops beating at ZooKeeper too, so the replica behind sees the silence it
should see. A beat that finds our lock node gone tells the elector: the only beat outcome
that ends a term.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.interfaces import IAsyncResult

from cluster.paths import Paths
from cluster.threads import guarded_thread
from fencing.beats import BeatOutcome, beat_data, beat_outcome, create_beat, drop_beat, send_beat
from fencing.errors import FencingError
from fencing.lease import Lease
from leader.beat_lease import BeatLease
from leader.settings import (
    LEASE_PER_LATENCY,
    PIPELINE_ANSWERED,
    PIPELINE_FLOOR,
    PROBE_AFTER,
)

log = logging.getLogger(__name__)

#: A gap between two turns of the beater longer than this is our own pause (SIGSTOP, a
#: frozen VM, starvation), not the server's: a stall is timed afresh from the end of it.
_OWN_PAUSE = 1.0
#: A stall still going is reported again once it grew by this factor since the last
#: report: a move refused (no other server looked faster yet) is asked again while the
#: beat stays unanswered, each time with a longer wait to compare against.
STALL_REPORT_GROWTH = 1.5
#: Beats in flight at most, whatever their age.
MAX_IN_FLIGHT = 64


@dataclass(frozen=True)
class BeatAck:
    """One of our beats, acknowledged: monotonic send and reply times, and the claim (in
    seconds from ``sent``) it announced."""

    sent: float
    acked: float
    lease: float


BeatListener = Callable[[BeatAck], None]


@dataclass
class _InFlight:
    node: str
    sent: float
    lease: float
    result: IAsyncResult
    settled: bool = field(default=False)


class Beater:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        owner: str,
        *,
        own_node: Callable[[], str | None],
        lease: Lease,
        interval: float,
        timeout: float,
        on_lock_gone: Callable[[str], None],
        ceiling: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[], IAsyncResult] | None = None,
    ) -> None:
        self._client = client
        self._probe = probe
        self._probe_sent: float | None = None  # a probe out, sent then
        self._answered_probe = float("-inf")  # the send time of the last probe answered
        self._paths = paths
        self._owner = owner
        self._own_node = own_node
        self._claim = lease
        self._interval = interval
        self._timeout = timeout
        self._on_lock_gone = on_lock_gone
        self._clock = clock
        # The claim never outlasts the read lease it is checked with (2/3 T): longer would
        # only make the replica behind wait on a leader that cannot claim anyway.
        top = max(lease.duration, timeout * 2 / 3 if ceiling is None else ceiling)
        self._meter = BeatLease(base=lease.duration, ceiling=top)
        self._listeners: list[BeatListener] = []
        self._stall_after: Callable[[], float] | None = None
        self._on_stall: Callable[[float], object] | None = None
        self._guard = threading.RLock()  # sends and settlements, from the loop or beat_now
        self._flight: list[_InFlight] = []
        self._answered: queue.SimpleQueue[_InFlight] = queue.SimpleQueue()
        self._node: str | None = None  # the lock node our beat node was made for
        self._stall_from = float("-inf")  # no stall counts from before our own pause
        self._stall_again = 0.0  # report the stall in flight again at this age (0: not yet)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = guarded_thread("beater", self._run, self._stop, backoff=0.2)

    def add_listener(self, listener: BeatListener) -> None:
        self._listeners.append(listener)

    def on_stall(self, after: Callable[[], float], callback: Callable[[float], object]) -> None:
        """Call ``callback(seconds)`` when the oldest beat in flight is unanswered for
        ``after()`` seconds on a connection that stays up (a server cut from its quorum
        holds writes without closing the connection: moving elsewhere beats again, same
        session), and again each time that wait grew by ``STALL_REPORT_GROWTH`` while no
        beat is answered."""
        self._stall_after, self._on_stall = after, callback

    def latency(self) -> float:
        """The latency our beats observe: the longest round trip of the last few seconds,
        or the wait of the oldest beat in flight, if longer."""
        with self._guard:
            return self._meter.latency(self._clock())

    def announce(self) -> tuple[float, bytes]:
        """For a beat written elsewhere (take-office, the term's first beat): the claim it
        announces from now, and the beat node data that says so. The caller renews the
        claim with it once that write is acknowledged."""
        with self._guard:
            now = self._clock()
            lease = self._meter.announce(now)
            self._meter.answered(now, None)  # not ours to time
            return lease, beat_data(self._owner, lease)

    def made(self, lock_node: str) -> bool:
        """Whether we made the beat node of ``lock_node`` (and saw none of our beats find
        it gone since): a write to it is then a set, not a create."""
        return self._node == lock_node

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def beat_now(self, wait: float) -> BeatOutcome | None:
        """One beat at once (after a resumed term), waiting up to ``wait`` for its reply;
        None when there is nothing to beat or no reply came in time."""
        with self._guard:
            beat = self._send()
        if beat is None or not beat.result.wait(wait):
            return None
        return self._settle(beat)

    # -- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        next_at = looked = self._clock()
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_at - self._clock()))
            self._wake.clear()
            now = self._clock()
            if now - looked > _OWN_PAUSE:
                self._stall_from = now  # we were paused, not the server
                self._stall_again = 0.0
            looked = now
            while not self._answered.empty():
                self._settle(self._answered.get())
            self._look_for_stall(now)
            if now >= next_at:
                next_at = now + self._interval
                try:
                    with self._guard:
                        self._send()
                except (KazooException, FencingError) as e:
                    log.debug("beat failed: %s", e)  # connection trouble: the lease says it

    def _send(self) -> _InFlight | None:
        """Send one beat if there is a node to beat and room in flight (under the guard)."""
        node = self._own_node()
        if node != self._node:
            self._switch(node)
        if node is None or self._client.state != KazooState.CONNECTED:
            return None
        now = self._clock()
        if self._flight and (
            len(self._flight) >= MAX_IN_FLIGHT
            or self._meter.oldest_in_flight_age(now) >= self._pipeline_limit(now)
        ):
            return None
        self._maybe_probe(now)
        if self._node is None:
            created = create_beat(
                self._client, self._paths, lock_node=node,
                data=beat_data(self._owner, self._meter.base), timeout=self._timeout,
            )  # fmt: skip
            if created is BeatOutcome.LOCK_GONE:
                self._on_lock_gone(node)
                return None
            self._node = node
            now = self._clock()
        lease = self._meter.announce(now)
        result = send_beat(
            self._client, self._paths, lock_node=node, data=beat_data(self._owner, lease)
        )
        beat = _InFlight(node, now, lease, result)
        self._flight.append(beat)
        result.rawlink(lambda _r: self._answered_now(beat))
        return beat

    def _pipeline_limit(self, now: float) -> float:
        """How old the oldest beat in flight may get before no more are sent."""
        answered = bool(self._flight) and self._answered_probe >= self._flight[0].sent
        return pipeline_limit(self._meter.round_trip(now), answered=answered)

    def _maybe_probe(self, now: float) -> None:
        """Ask the other session once the oldest beat in flight has waited ``PROBE_AFTER``
        (one probe out at a time): its answer tells slow from lost."""
        if self._probe is None or self._probe_sent is not None or not self._flight:
            return
        if now - self._flight[0].sent < PROBE_AFTER:
            return
        try:
            result = self._probe()
        except KazooException as e:
            log.debug("probe not sent: %s", e)
            return
        self._probe_sent = now
        result.rawlink(lambda r: self._probe_answered(now, r))

    def _probe_answered(self, sent: float, result: IAsyncResult) -> None:
        """kazoo's callback thread: the server answered (or the request failed). Never
        blocks (no guard: one probe is out at a time, and these are single assignments)."""
        if result.successful():
            self._answered_probe = max(self._answered_probe, sent)
        self._probe_sent = None

    def _answered_now(self, beat: _InFlight) -> None:
        """kazoo's callback thread: hand the reply to the loop, never block."""
        self._answered.put(beat)
        self._wake.set()

    def _settle(self, beat: _InFlight) -> BeatOutcome | None:
        """Act on one beat's reply, once."""
        with self._guard:
            if beat.settled:
                return None
            beat.settled = True
            if beat in self._flight:
                self._flight.remove(beat)
            try:
                outcome = beat_outcome(beat.result, timeout=0)
            except (KazooException, FencingError) as e:
                log.debug("beat failed: %s", e)
                self._meter.answered(beat.sent, None)
                return None
            if outcome is not BeatOutcome.OK:
                self._meter.answered(beat.sent, None)
                if outcome is BeatOutcome.LOCK_GONE:
                    self._on_lock_gone(beat.node)
                elif beat.node == self._node:
                    self._node = None  # made again on the next beat
                return outcome
            acked = self._clock()
            self._meter.answered(beat.sent, acked)
            self._claim.renew(beat.sent, beat.lease)
            self._stall_again = 0.0
            ack = BeatAck(beat.sent, acked, beat.lease)
        for listener in list(self._listeners):
            listener(ack)
        return outcome

    def _look_for_stall(self, now: float) -> None:
        after, callback = self._stall_after, self._on_stall
        if callback is None or after is None:
            return
        with self._guard:
            if not self._flight:
                return
            stall = now - max(self._flight[0].sent, self._stall_from)
        if stall < max(after(), self._stall_again) or self._client.state != KazooState.CONNECTED:
            return
        self._stall_again = stall * STALL_REPORT_GROWTH
        try:
            callback(stall)
        except Exception:  # a failed reaction must not stop the beats
            log.exception("reacting to a stalled beat failed")

    def _switch(self, node: str | None) -> None:
        """Our lock node changed: forget its beats in flight, and drop the beat node of the
        one we left (best effort; the session's end drops it otherwise)."""
        old, self._node = self._node, None
        for beat in self._flight:
            beat.settled = True
        self._flight.clear()
        self._meter.forget_in_flight()
        if old is None or self._client.state != KazooState.CONNECTED:
            return
        try:
            drop_beat(self._client, self._paths, lock_node=old, timeout=self._timeout)
        except (KazooException, FencingError) as e:
            log.info("could not drop the beat node of %s: %s", old, e)


def pipeline_limit(round_trip: float, *, answered: bool) -> float:
    """How old the oldest beat in flight may get before no more beats are sent: the floor
    (or ``PIPELINE_ANSWERED`` while our other session was answered since that beat went
    out: slow, not lost), or 2.5 of the round trips remembered, if longer."""
    floor = PIPELINE_ANSWERED if answered else PIPELINE_FLOOR
    return max(floor, LEASE_PER_LATENCY * round_trip)
