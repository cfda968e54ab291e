"""When a replica in front of us has gone silent: the decision, as a pure state machine.

etcd's raft shape: inputs are what was seen and when (the beat node's version of the lock
node in front of ours, our own connection state, our own beats' round trips), the output
of ``decide(now)`` is one action with the time to decide again. No I/O, no clock of its
own: ``leader.silence_watch`` feeds it from kazoo and acts, tests feed it a fake clock, and
the Promela model in ``model/`` mirrors it.

A target is silent when its beat node stayed at one version for the whole window (or
stayed absent: ``ABSENT``, a replica frozen between queueing and its first beat), while
for that whole window our own connection was CONNECTED and our own beats committed with
no gap longer than our own current claim (which grows with our own latency, so a
uniformly slow ZooKeeper still lets us replace a leader that really stopped). The last two
make a stall of ZooKeeper itself (or our own pause) never look like a silent leader: the
window restarts when we are heard again.

The window follows the claim the watched beat announced (``BeatSettings.window``: at least
P, and ``(L_v*(1+rho) + T_op)/(1-rho)`` when its sender announced a longer claim L_v under
a slow ZooKeeper). Why that suffices: the window starts when we *received* the version, so
after its commit, and the target's claims on it and on every earlier beat (whose announced
ends are never later: ``leader.beat_lease``) end by that send time + L_v on its clock.

A target heard dead (our held connection to its process closed by its end and every
reconnect since failing: ``leader.peer_link``) is given the short window
``(L_v*(1+rho) + T_op)/(1-rho)`` instead of P. That is still the whole claim and T_op: a
closed or refused link is no proof of death (a REJECT rule gives both to a live leader),
so it only drops the margin P keeps against hiccups, and the beat must still be silent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from leader.settings import BeatSettings

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

    def __init__(self, settings: BeatSettings) -> None:
        if settings.silence_window <= 0:
            raise ValueError(f"the silence window must be > 0, got {settings.silence_window}")
        self._s = settings
        self._dead = False
        self.target: str | None = None
        self._version: int | None = None
        self._announced: float | None = None  # the claim the watched version announced
        self._version_since = 0.0
        self._connected = False
        self._connected_since = 0.0
        self._own_sent: float | None = None  # send time of our last acknowledged beat
        self._own_acked: float | None = None  # when it was acknowledged
        self._own_since = 0.0  # our beats have committed without a long gap since then
        self._own_lease = settings.leader_lease  # the claim our last acknowledged beat announced

    # -- inputs -------------------------------------------------------------------------

    def watch(self, target: str | None, now: float) -> None:
        """The lock node in front of ours is now ``target`` (None: we are first, or out)."""
        if target != self.target:
            self.target, self._version, self._version_since = target, None, now
            self._announced, self._dead = None, False

    def peer_dead(self, target: str, dead: bool) -> None:
        """Whether ``target``'s process is heard dead (``leader.peer_link``: our held link
        closed by its end, and reconnects failing since): its silence needs no margin
        beyond its claim."""
        if target == self.target:
            self._dead = dead

    def saw(
        self, target: str, version: int | None, now: float, announced: float | None = None
    ) -> None:
        """A read of ``target``'s beat node answered at ``now`` (None: no beat node), with
        the claim that version announced (None: none announced)."""
        if target != self.target:
            return  # a read about a node we no longer watch
        version = ABSENT if version is None else version
        if version != self._version:
            self._version, self._version_since = version, now
            self._announced = announced

    def connection(self, connected: bool, now: float) -> None:
        if connected and not self._connected:
            self._connected_since = now
        self._connected = connected

    def own_beat(self, sent: float, acked: float, lease: float | None = None) -> None:
        """One of our beats, sent at ``sent`` and announcing ``lease``, was acknowledged at
        ``acked``. A gap longer than our claim before it is a stall, whatever comes after."""
        gap = self._own_gap()
        if self._own_acked is None or sent - self._own_acked > gap or acked - sent > gap:
            # Not heard for longer than the gap (a stall of ZooKeeper, or our own pause):
            # what we saw of others' beats meanwhile proves nothing.
            self._own_since = acked
        if self._own_sent is None or sent > self._own_sent:
            self._own_sent = sent
        if self._own_acked is None or acked > self._own_acked:
            self._own_acked = acked
            self._own_lease = max(self._s.leader_lease, lease or 0.0)

    def _own_gap(self) -> float:
        """Our own beats count as lapsed after a gap of our own current claim, so beats
        that are slow but steady still count; but never after more than the claim the
        watched beat announced. The SPIN model found why: a replica whose own claim grew
        (it was paused, and remembers a long round trip) would otherwise sit through a
        stall of ZooKeeper longer than the leader's window without restarting its own,
        and when ZooKeeper answered again, preempt a leader that beat throughout (the
        leader's beats were held with everyone's). Both windows exceed L_v by T_op."""
        announced = self._s.leader_lease if self._announced is None else self._announced
        return max(self._s.leader_lease, min(self._own_lease, announced))

    # -- the decision -------------------------------------------------------------------

    def decide(self, now: float) -> Decision:
        if self.target is None:
            return Decision(Verdict.IDLE)
        if not self._connected:
            return Decision(Verdict.DISCONNECTED, self.target)
        if self._version is None:
            return Decision(Verdict.NO_BEAT, self.target)
        gap = self._own_gap()
        if self._own_sent is None or now - self._own_sent > gap:
            return Decision(Verdict.OWN_BEATS_LAPSED, self.target, self._version)
        since = max(self._version_since, self._connected_since, self._own_since)
        window = self._s.window(self._announced)
        dead_window = self._s.dead_window(self._announced) if self._dead else None
        short = dead_window is not None and dead_window < window
        if short and dead_window is not None:
            window = dead_window
        if now - since >= window:
            return Decision(Verdict.SILENT, self.target, self._version, short=short)
        # Also decide again when our own beats would count as lapsed: a beat stuck in
        # flight sends no input, and the verdict must not stay WATCHING past it.
        lapse = self._own_sent + gap
        return Decision(Verdict.WATCHING, self.target, self._version, min(since + window, lapse))
