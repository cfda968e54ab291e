"""When a replica in front of us has gone silent: the decision, as a pure state machine.

etcd's raft shape: inputs are what was seen and when (the beat node's version of the lock
node in front of ours, our own connection state, our own beats' round trips), the output
of ``decide(now)`` is one action with the time to decide again. No I/O, no clock of its
own: ``leader.silence_watch`` feeds it from kazoo and acts, tests feed it a fake clock, and
the Promela model in ``model/`` mirrors it.

A target is silent when its beat node stayed at one version for the whole window P (or
stayed absent: ``ABSENT``, a replica frozen between queueing and its first beat), while
for that whole window our own connection was CONNECTED and our own beats committed with
no gap longer than ``own_gap``. The last two make a stall of ZooKeeper itself (or our own
pause) never look like a silent leader: the window restarts when we are heard again.

Why P suffices (DESIGN item 8): the window starts when we *received* the version, so after
its commit, and the target's last acknowledged beat was sent before that commit. The target
claims leadership only until that send time + L on its clock, so with
``L*(1+rho) + T_op <= P*(1-rho)`` its claims and unfenced actions are over before we act.

A target whose process is heard dead (its kernel closed our held connection to it, and no
connect since succeeded: ``leader.peer_link``) is given the shorter ``closed_window``,
``L*(1+rho) + H`` over ``1-rho``: its claims are over by then all the same; T_op is left
out because a dead process acts no more (were it alive after all, its writes stay fenced).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: The "version" of a beat node that does not exist. A replica creates its beat node with
#: its first beat, just after queueing; one frozen in between has none, and must not hold
#: the queue until its session expires. Its preemption proves the node still absent.
ABSENT = -1


class Verdict(enum.Enum):
    """What ``decide`` found; the words are for the history."""

    IDLE = "no replica in front of ours"
    NO_BEAT = "the beat node of the replica in front is not read yet"
    DISCONNECTED = "our own connection is not CONNECTED"
    OWN_BEATS_LAPSED = "our own beats are not committing"
    WATCHING = "watching the beat of the replica in front"
    SILENT = "the replica in front is silent: verify and preempt"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    target: str | None = None  # the lock node in front of ours
    version: int | None = None  # its beat node's version, unchanged for the window
    wake_at: float | None = None  # decide again then (None: on the next input)
    short: bool = False  # the shorter window of a target heard dead


class SilenceMachine:
    """Not thread-safe: the caller serialises inputs (``leader.silence_watch`` holds a lock)."""

    def __init__(
        self, *, window: float, own_gap: float, closed_window: float | None = None
    ) -> None:
        if window <= 0 or own_gap <= 0:
            raise ValueError(f"window and own_gap must be > 0, got {window} and {own_gap}")
        self._window = window
        self._own_gap = own_gap
        # The window once the target's process is heard dead (``leader.peer_link``).
        self._closed_window = min(window, closed_window or window)
        self._closed = False
        self.target: str | None = None
        self._version: int | None = None
        self._version_since = 0.0
        self._connected = False
        self._connected_since = 0.0
        self._own_sent: float | None = None  # send time of our last acknowledged beat
        self._own_acked: float | None = None  # when it was acknowledged
        self._own_since = 0.0  # our beats have committed without a long gap since then

    # -- inputs -------------------------------------------------------------------------

    def watch(self, target: str | None, now: float) -> None:
        """The lock node in front of ours is now ``target`` (None: we are first, or out)."""
        if target != self.target:
            self.target, self._version, self._version_since = target, None, now
            self._closed = False

    def peer_closed(self, target: str, closed: bool) -> None:
        """Whether the held connection to ``target``'s process was closed by its kernel
        and not reopened: a dead process, so its beat's silence needs a shorter window."""
        if target == self.target:
            self._closed = closed

    def saw(self, target: str, version: int | None, now: float) -> None:
        """A read of ``target``'s beat node answered at ``now`` (None: no beat node)."""
        if target != self.target:
            return  # a read about a node we no longer watch
        version = ABSENT if version is None else version
        if version != self._version:
            self._version, self._version_since = version, now

    def connection(self, connected: bool, now: float) -> None:
        if connected and not self._connected:
            self._connected_since = now
        self._connected = connected

    def own_beat(self, sent: float, acked: float) -> None:
        """One of our beats, sent at ``sent``, was acknowledged at ``acked``."""
        if (
            self._own_acked is None
            or sent - self._own_acked > self._own_gap
            or acked - sent > self._own_gap
        ):
            # Not heard for longer than the gap (a stall of ZooKeeper, or our own pause):
            # what we saw of others' beats meanwhile proves nothing.
            self._own_since = acked
        if self._own_sent is None or sent > self._own_sent:
            self._own_sent = sent
        if self._own_acked is None or acked > self._own_acked:
            self._own_acked = acked

    # -- the decision -------------------------------------------------------------------

    def decide(self, now: float) -> Decision:
        if self.target is None:
            return Decision(Verdict.IDLE)
        if not self._connected:
            return Decision(Verdict.DISCONNECTED, self.target)
        if self._version is None:
            return Decision(Verdict.NO_BEAT, self.target)
        if self._own_sent is None or now - self._own_sent > self._own_gap:
            return Decision(Verdict.OWN_BEATS_LAPSED, self.target, self._version)
        since = max(self._version_since, self._connected_since, self._own_since)
        window = self._closed_window if self._closed else self._window
        if now - since >= window:
            return Decision(Verdict.SILENT, self.target, self._version, short=self._closed)
        # Also decide again when our own beats would count as lapsed: a beat stuck in
        # flight sends no input, and the verdict must not stay WATCHING past it.
        lapse = self._own_sent + self._own_gap
        return Decision(Verdict.WATCHING, self.target, self._version, min(since + window, lapse))
