"""Leaving a ZooKeeper server that holds our beats, and only one slower than its ensemble.

A beat left unanswered on a connection that stays up says our server holds writes: a
server frozen, or cut from its quorum, keeps its clients for syncLimit while every write
waits, and a move to another server (same session, ``cluster.server_move``) beats again.
But a beat is just as late when every server is slow: a disk whose fsync takes 0.5-2 s
everywhere makes every write take one to two fsyncs (ZooKeeper batches them), through any
server. A move then gains nothing and drops the connection, which cancels the term. Two
rules keep the move for a server slower than the rest:

- The stall threshold follows the latency our beats observe: ``STALL_PER_LATENCY`` times
  the longest round trip of the beats acknowledged in the last ``LATENCY_MEMORY`` seconds,
  at least max(P/2, 4H) (the fixed threshold it was), at most T/2 (later, a move could not
  land before the session expires on the quorum's side). Only acknowledged beats count:
  the beater's ``latency()`` also counts the beat in flight, which is the stall itself, so
  a threshold on it would never be reached.
- The probe compares like with like. A new session (``cluster.quorum_probe``) is a write
  through the probed server as a beat is one through ours, so it gets half the stall as
  its deadline: only a server that commits a write in at most half the time our beat has
  waited answers. And the move is called off if a beat of ours is acknowledged before a
  server answered: ours was no slower.

The move runs on a thread of its own: the beater's loop, which reports the stall, goes on
settling replies meanwhile, and those are what may call the move off. A stall that goes on
is reported again as it grows (``leader.heartbeat.STALL_REPORT_GROWTH``), so a probe refused
while the other servers were slow too is asked again with the longer wait; a report made
while a probe runs is probed after it, not dropped.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from cluster.server_move import Move, ServerMover
from leader.heartbeat import BeatAck, BeatListener
from leader.settings import LATENCY_MEMORY, BeatSettings

log = logging.getLogger(__name__)

#: A beat counts as stalled once unanswered this many times the recent round trip.
STALL_PER_LATENCY = 2.0


class StallRule:
    """When a beat in flight is stalled, and how long a probe may take to beat it. Pure
    logic on ``clock`` (the beater's), safe from any thread."""

    def __init__(
        self,
        *,
        floor: float,
        ceiling: float,
        per_latency: float = STALL_PER_LATENCY,
        memory: float = LATENCY_MEMORY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < floor <= ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got {floor} and {ceiling}")
        self.floor, self.ceiling = floor, ceiling
        self._k = per_latency
        self._memory = memory
        self._clock = clock
        self._guard = threading.Lock()
        self._round_trips: collections.deque[tuple[float, float]] = collections.deque()
        self._last_ack = float("-inf")

    def beat_acked(self, sent: float, acked: float) -> None:
        with self._guard:
            self._round_trips.append((acked, max(0.0, acked - sent)))
            self._last_ack = max(self._last_ack, acked)

    def latency(self) -> float:
        """The longest round trip of the beats acknowledged in the last ``memory``
        seconds (0 when none was)."""
        with self._guard:
            horizon = self._clock() - self._memory
            while self._round_trips and self._round_trips[0][0] < horizon:
                self._round_trips.popleft()
            return max((rtt for _, rtt in self._round_trips), default=0.0)

    def threshold(self) -> float:
        """Seconds a beat may stay unanswered before our server counts as holding it."""
        return min(self.ceiling, max(self.floor, self._k * self.latency()))

    @staticmethod
    def probe_deadline(stall: float) -> float:
        """A server that opens a session within this, while our beat has waited ``stall``
        and waits on, commits writes at least twice as fast as ours."""
        return stall / 2

    def acked_since(self, when: float) -> bool:
        with self._guard:
            return self._last_ack > when


class StallMove:
    """Beater stall -> probe -> move, one at a time."""

    def __init__(
        self,
        rule: StallRule,
        move: Callable[..., Move | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rule = rule
        self._move = move
        self._clock = clock
        self._guard = threading.Lock()
        self._busy = False
        self._pending: tuple[float, float] | None = None  # (seconds, reported) while busy

    def beat_acked(self, ack: BeatAck) -> None:
        self.rule.beat_acked(ack.sent, ack.acked)

    def busy(self) -> bool:
        """A probe (or the move after it) is running."""
        with self._guard:
            return self._busy

    def stalled(self, seconds: float) -> None:
        """The beater's report (its own thread): probe and move on a thread of ours. A
        report while a probe runs is kept (the latest) and probed after it: the beater
        reports a stall again as it grows, about when a refused probe ends."""
        reported = self._clock()
        with self._guard:
            if self._busy:
                self._pending = (seconds, reported)
                return
            self._busy = True
        threading.Thread(
            target=self._probe_and_move, args=(seconds, reported), name="stall-move", daemon=True
        ).start()

    def _probe_and_move(self, seconds: float, reported: float) -> None:
        try:
            self._probe_until_answered(seconds, reported)
        except BaseException:  # never leave the mover busy for good: no move would follow
            with self._guard:
                self._busy, self._pending = False, None
            raise

    def _probe_until_answered(self, seconds: float, reported: float) -> None:
        while True:
            try:
                self._move(
                    f"our beat unanswered for {seconds:.1f}s",
                    probe_timeout=self.rule.probe_deadline(seconds),
                    unless=lambda since=reported: self.rule.acked_since(since),
                )
            except Exception:  # a failed move must not end the next one
                log.exception("moving off a ZooKeeper server that holds our beats failed")
            with self._guard:
                pending, self._pending = self._pending, None
                if pending is None or self.rule.acked_since(pending[1]):
                    self._busy = False
                    return
            # The stall went on while we probed: it is older now than when reported.
            seconds, reported = pending[0] + self._clock() - pending[1], pending[1]


class BeatEvents(Protocol):
    """Where our beats are heard (the ``Elector``): each acknowledgement, each stall."""

    def on_beat(self, listener: BeatListener) -> None: ...

    def on_stall(self, after: Callable[[], float], callback: Callable[[float], object]) -> None: ...


def follow_stalls(
    events: BeatEvents, mover: ServerMover, beats: BeatSettings, session_timeout: float
) -> StallMove | None:
    """Have the stalls of the beats ``events`` reports move us off our server; None when
    no threshold fits in half the session (the move could not land before it expires)."""
    floor = max(beats.silence_window / 2, 4 * beats.interval)
    if 2 * floor > session_timeout:
        return None
    stalls = StallMove(StallRule(floor=floor, ceiling=session_timeout / 2), mover.move)
    events.on_beat(stalls.beat_acked)
    events.on_stall(stalls.rule.threshold, stalls.stalled)
    return stalls
