"""The leader lease: claim leadership only while ZooKeeper spoke to us recently.

A process that wakes from a pause (SIGSTOP, a long GC, a frozen VM) still believes what
it believed before, and kazoo needs a moment to notice that its session is gone. The
lease closes that window: a replica answers as leader, and writes, only while its last
confirmed round trip to ZooKeeper started less than ``duration`` ago on the monotonic
clock. With ``duration`` = 2/3 of the session timeout the lease always runs out before
ZooKeeper could have expired the session and let another replica win.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from cluster.threads import guarded_thread

Clock = Callable[[], float]


class Lease:
    """A renewable lease on an injected monotonic clock (pure logic, no I/O)."""

    def __init__(self, duration: float, *, clock: Clock = time.monotonic) -> None:
        if duration <= 0:
            raise ValueError(f"lease duration must be > 0, got {duration}")
        self.duration = duration
        self._clock = clock
        self._renewed_at: float | None = None
        self._ends_at: float | None = None
        self._lock = threading.Lock()

    def renew(self, sent_at: float, duration: float | None = None) -> None:
        """Renew from a round trip that *started* at ``sent_at`` (the conservative end),
        for ``duration`` (default: the lease's own). A renewal never shortens the lease:
        a beat that announced a long lease stays valid when a later one announces less."""
        end = sent_at + (self.duration if duration is None else duration)
        with self._lock:
            if self._renewed_at is None or sent_at > self._renewed_at:
                self._renewed_at = sent_at
            if self._ends_at is None or end > self._ends_at:
                self._ends_at = end

    def expire(self) -> None:
        with self._lock:
            self._renewed_at = self._ends_at = None

    def valid(self) -> bool:
        return self.remaining() > 0

    def remaining(self) -> float:
        """Seconds left (0 when lapsed or never renewed)."""
        with self._lock:
            ends = self._ends_at
        return 0.0 if ends is None else max(0.0, ends - self._clock())

    def age(self) -> float:
        """Seconds since the last renewal (infinite when never renewed)."""
        with self._lock:
            renewed = self._renewed_at
        return float("inf") if renewed is None else self._clock() - renewed


class Heartbeat:
    """Renews a lease from cheap ZooKeeper reads at a fraction of the lease.

    kazoo exposes no "last reply" time, so a small ``exists`` round trip every
    ``interval`` seconds stands in for it.
    """

    def __init__(
        self,
        client: KazooClient,
        lease: Lease,
        *,
        path: str = "/",
        interval: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self._client = client
        self._lease = lease
        self._path = path
        self._interval = interval
        self._clock = clock
        self._stop = threading.Event()
        self._thread = guarded_thread("zk-heartbeat", self._run, self._stop)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def beat(self) -> bool:
        """One round trip; True (and the lease renewed) when ZooKeeper answered."""
        sent = self._clock()
        try:
            # As long as the lease: the read queues behind the session's writes in flight
            # (one session is answered in order), which a slow disk holds for seconds.
            self._client.exists_async(self._path).get(timeout=self._lease.duration)
        except Exception:  # any failure simply does not renew
            return False
        self._lease.renew(sent)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.beat()
            self._stop.wait(self._interval)
