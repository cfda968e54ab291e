"""The beater: every H, one beat of our own lock node, one in flight at a time.

A beat waits for its reply before the next is sent. A replica whose replies are lost (its
requests still reach ZooKeeper) thus stops beating at ZooKeeper too, instead of beating on
for the seconds kazoo needs to notice: the successor sees the silence it should see.

An acknowledged beat renews the claim lease (``fencing.lease.Lease`` of duration L) from
the time it was *sent*, and is reported to listeners (the silence watch counts our own
beats). A beat that finds our lock node gone tells the elector: the only beat outcome
that ends a term.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from cluster.paths import Paths
from cluster.threads import guarded_thread
from fencing.beats import BeatOutcome, beat_outcome, create_beat, drop_beat, send_beat
from fencing.errors import FencingError
from fencing.lease import Lease

log = logging.getLogger(__name__)

#: How often a beat stuck in flight looks up to see whether it should stop waiting.
_STUCK_POLL = 0.25
#: A gap between two such looks longer than this is our own pause (SIGSTOP, a frozen VM,
#: starvation), not the server's: the stall is timed afresh from the end of it.
_OWN_PAUSE = 1.0

BeatListener = Callable[[float, float], None]  # (sent, acknowledged), monotonic seconds


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._paths = paths
        self._owner = owner
        self._own_node = own_node
        self._lease = lease
        self._interval = interval
        self._timeout = timeout
        self._on_lock_gone = on_lock_gone
        self._clock = clock
        self._listeners: list[BeatListener] = []
        self._stall_after: float | None = None
        self._on_stall: Callable[[float], object] | None = None
        self._one_at_a_time = threading.Lock()
        self._node: str | None = None  # the lock node our beat node was made for
        self._stop = threading.Event()
        self._thread = guarded_thread("beater", self._run, self._stop, backoff=0.2)

    def add_listener(self, listener: BeatListener) -> None:
        self._listeners.append(listener)

    def on_stall(self, after: float, callback: Callable[[float], object]) -> None:
        """Call ``callback(seconds)`` once per beat left unanswered for ``after`` seconds
        on a connection that stays up (a server cut from its quorum holds writes without
        closing the connection: moving elsewhere beats again, same session)."""
        self._stall_after, self._on_stall = after, callback

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def beat_now(self, wait: float) -> BeatOutcome | None:
        """One beat at once (after a resumed term); None when there is nothing to beat or
        a beat still in flight holds the turn for longer than ``wait``."""
        if not self._one_at_a_time.acquire(timeout=wait):
            return None
        try:
            return self._beat_locked()
        finally:
            self._one_at_a_time.release()

    def _run(self) -> None:
        next_at = self._clock()
        while not self._stop.wait(max(0.0, next_at - self._clock())):
            next_at = self._clock() + self._interval
            try:
                self._beat_once()
            except (KazooException, FencingError) as e:
                log.debug("beat failed: %s", e)  # connection trouble: the lease says it

    def _beat_once(self) -> BeatOutcome | None:
        with self._one_at_a_time:
            return self._beat_locked()

    def _beat_locked(self) -> BeatOutcome | None:
        node = self._own_node()
        if node != self._node:
            self._switch(node)
        if node is None or self._client.state != KazooState.CONNECTED:
            return None
        if self._node is None:
            if create_beat(
                self._client, self._paths, lock_node=node, owner=self._owner,
                timeout=self._timeout,
            ) is BeatOutcome.LOCK_GONE:  # fmt: skip
                self._on_lock_gone(node)
                return BeatOutcome.LOCK_GONE
            self._node = node
        sent = self._clock()
        pending = send_beat(self._client, self._paths, lock_node=node, owner=self._owner)
        stalled_from = looked = sent
        reported = False
        while not pending.ready():
            pending.wait(_STUCK_POLL)
            if self._stop.is_set():
                return None
            now = self._clock()
            if now - looked > _OWN_PAUSE:
                stalled_from = now  # we were paused, not the server
            looked = now
            stall = now - stalled_from
            after, callback = self._stall_after, self._on_stall
            if (
                not reported
                and callback is not None
                and after is not None
                and stall >= after
                and self._client.state == KazooState.CONNECTED
            ):
                reported = True
                try:
                    callback(stall)
                except Exception:  # a failed reaction must not stop the beats
                    log.exception("reacting to a stalled beat failed")
        outcome = beat_outcome(pending, timeout=0)
        if outcome is BeatOutcome.OK:
            acked = self._clock()
            self._lease.renew(sent)
            for listener in list(self._listeners):
                listener(sent, acked)
        elif outcome is BeatOutcome.LOCK_GONE:
            self._on_lock_gone(node)
        else:
            self._node = None  # made again on the next beat
        return outcome

    def _switch(self, node: str | None) -> None:
        """Our lock node changed: drop the beat node of the one we left (best effort; the
        session's end drops it otherwise)."""
        old, self._node = self._node, None
        if old is None or self._client.state != KazooState.CONNECTED:
            return
        try:
            drop_beat(self._client, self._paths, lock_node=old, timeout=self._timeout)
        except (KazooException, FencingError) as e:
            log.info("could not drop the beat node of %s: %s", old, e)
