"""The claim a beat announces follows the latency the beats observe (DESIGN item 9).

A fixed claim L ends every claim once a write takes longer than L: a ZooKeeper whose fsync
takes 0.45 s (it only warns at 1 s) then left the cluster with no leader for as long as it
was slow. Instead each beat announces, in its own data, how long its sender will claim on
it: ``k`` times the longest round trip of the beats acknowledged in the last ``memory``
seconds, or, while the oldest beat still in flight has waited clearly longer than that,
``k_wait`` times its wait (a slow spell's onset), between L_base and a ceiling. The
replica behind reads the announcement with the beat's version and waits at least what it
announced (``BeatSettings.window``), so the claim can grow without breaking
``(L_v + T_op)*(1+rho) <= W_v*(1-rho)``.

Two rules keep that sound across beats: an announcement never ends earlier than one made
before it (a claim's end only moves forward with the version, so the last version seen
bounds every claim made on an earlier one), and the claim of an acknowledged beat counts
from its *send* time.

Pure logic on the caller's clock: the beater feeds it sends and replies.
"""

from __future__ import annotations

import collections
import contextlib

from leader.settings import LATENCY_MEMORY, LEASE_PER_LATENCY, LEASE_PER_WAIT, ONSET_WAIT


class BeatLease:
    """Not thread-safe: the beater serialises calls."""

    def __init__(
        self,
        *,
        base: float,
        ceiling: float,
        per_latency: float = LEASE_PER_LATENCY,
        per_wait: float = LEASE_PER_WAIT,
        memory: float = LATENCY_MEMORY,
    ) -> None:
        if not 0 < base <= ceiling:
            raise ValueError(f"need 0 < base <= ceiling, got {base} and {ceiling}")
        self.base = base
        self.ceiling = ceiling
        self._k = per_latency
        self._k_wait = per_wait
        self._memory = memory
        self._samples: collections.deque[tuple[float, float]] = collections.deque()  # (acked, rtt)
        self._in_flight: collections.deque[float] = collections.deque()  # send times, in order
        self._announced_until = float("-inf")

    def announce(self, now: float) -> float:
        """The claim, in seconds from ``now``, of a beat sent at ``now``; recorded as in
        flight. Never ends before an earlier announcement's end."""
        rtt, wait = self.round_trip(now), self.oldest_in_flight_age(now)
        want = self._k_wait * wait if wait > ONSET_WAIT * rtt else self._k * rtt
        lease = min(self.ceiling, max(self.base, want))
        lease = max(lease, self._announced_until - now)
        self._announced_until = now + lease
        self._in_flight.append(now)
        return lease

    def answered(self, sent: float, acked: float | None) -> None:
        """The beat sent at ``sent`` got its reply at ``acked`` (None: it failed or its
        outcome is unknown: no latency is learnt from it)."""
        with contextlib.suppress(ValueError):  # forgotten with the connection
            self._in_flight.remove(sent)
        if acked is not None:
            self._samples.append((acked, max(0.0, acked - sent)))
            self._prune(acked)

    def forget_in_flight(self) -> None:
        """The connection dropped: what was in flight will never be answered."""
        self._in_flight.clear()

    def oldest_in_flight_age(self, now: float) -> float:
        return now - self._in_flight[0] if self._in_flight else 0.0

    def in_flight(self) -> int:
        return len(self._in_flight)

    def latency(self, now: float) -> float:
        """The longest round trip remembered, or the oldest beat's wait, if longer."""
        return max(self.round_trip(now), self.oldest_in_flight_age(now))

    def round_trip(self, now: float) -> float:
        """The longest round trip of the beats answered in the last ``memory`` seconds."""
        self._prune(now)
        return max((sample for _, sample in self._samples), default=0.0)

    def _prune(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self._memory:
            self._samples.popleft()
