"""The silence decision (``leader.silence``) on a fake clock, and the margin rule of H, P, L."""

from __future__ import annotations

import pytest

from cluster.errors import ConfigError
from leader.settings import (
    CLOCK_RATE_BOUND,
    DEFAULT_BEAT_INTERVAL,
    DEFAULT_LEADER_LEASE,
    DEFAULT_SILENCE_WINDOW,
    MAX_UNFENCED_ACTION,
    BeatSettings,
    margin_holds,
)
from leader.silence import ABSENT, SilenceMachine, Verdict
from nimbus.config import make_config

P, H = 2.0, 0.2
LEADER = "/storm/leader-lock/a__lock__0000000001"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watching(clock: Clock, announced: float | None = None) -> SilenceMachine:
    """Connected, our own beats committing, the leader's beat seen at version 7 (having
    announced the claim ``announced``)."""
    m = SilenceMachine(BeatSettings())
    m.connection(True, clock())
    m.own_beat(clock(), clock())
    m.watch(LEADER, clock())
    m.saw(LEADER, 7, clock(), announced)
    return m


def run(m: SilenceMachine, clock: Clock, seconds: float, *, own_beats: bool = True) -> None:
    """Let ``seconds`` pass in beat intervals, our own beats committing if ``own_beats``."""
    end = clock.now + seconds
    while clock.now < end - 1e-9:
        clock.now = min(end, clock.now + H)
        if own_beats:
            m.own_beat(clock.now - 0.01, clock.now)


def test_a_beat_unchanged_for_the_window_is_silence_and_not_a_moment_sooner() -> None:
    clock = Clock()
    m = watching(clock)
    run(m, clock, P - 0.01)
    d = m.decide(clock())
    assert d.verdict is Verdict.WATCHING
    assert d.wake_at is not None and d.wake_at <= clock() + 0.01 + 1e-9  # the timer, at P
    run(m, clock, 0.01)
    d = m.decide(clock())
    assert (d.verdict, d.target, d.version) == (Verdict.SILENT, LEADER, 7)


def test_the_timer_is_set_at_the_window_end() -> None:
    clock = Clock()
    m = watching(clock)
    start = clock()
    d = m.decide(clock())
    assert d.wake_at is not None and start < d.wake_at <= start + P


def test_a_new_version_restarts_the_window() -> None:
    clock = Clock()
    m = watching(clock)
    run(m, clock, 1.5)
    m.saw(LEADER, 8, clock())
    run(m, clock, 1.5)
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, 0.5)
    assert m.decide(clock()).version == 8 and m.decide(clock()).verdict is Verdict.SILENT


def test_a_stall_of_zookeeper_is_not_silence() -> None:
    """Our own beats stop committing too: the window starts again when they commit."""
    clock = Clock()
    m = watching(clock)
    run(m, clock, 0.5)
    run(m, clock, 1.6, own_beats=False)  # ZooKeeper answers nobody
    assert m.decide(clock()).verdict is Verdict.OWN_BEATS_LAPSED
    stalled_until = clock.now
    m.own_beat(clock.now - 1.6, clock.now)  # the beat stuck in flight comes back
    run(m, clock, 1.9)
    assert m.decide(clock()).verdict is Verdict.WATCHING
    clock.now = stalled_until + P
    assert m.decide(clock()).verdict is Verdict.SILENT


def test_our_own_pause_is_not_the_leaders_silence() -> None:
    """Waking from a pause, our last beat is old: nothing is decided until ours commit."""
    clock = Clock()
    m = watching(clock)
    clock.now += 5.0  # we were stopped
    assert m.decide(clock()).verdict is Verdict.OWN_BEATS_LAPSED
    m.own_beat(clock.now, clock.now + 0.01)
    clock.now += 0.01
    d = m.decide(clock())
    assert d.verdict is Verdict.WATCHING


def test_a_disconnect_restarts_the_window() -> None:
    clock = Clock()
    m = watching(clock)
    run(m, clock, 1.5)
    m.connection(False, clock())
    assert m.decide(clock()).verdict is Verdict.DISCONNECTED
    m.connection(True, clock())
    run(m, clock, 1.5)
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, 0.5)
    assert m.decide(clock()).verdict is Verdict.SILENT


def test_a_beat_node_absent_for_the_window_is_silence_and_no_target_never_is() -> None:
    """A replica frozen between queueing and its first beat has no beat node: absent for P
    it is silent (it used to hold the queue until its session expired)."""
    clock = Clock()
    m = watching(clock)
    m.saw(LEADER, None, clock())
    run(m, clock, 1.9)
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, 0.2)
    decision = m.decide(clock())
    assert decision.verdict is Verdict.SILENT and decision.version == ABSENT
    m.saw(LEADER, 0, clock())  # its first beat: the window starts again
    assert m.decide(clock()).verdict is Verdict.WATCHING
    m.watch(None, clock())
    assert m.decide(clock()).verdict is Verdict.IDLE


def test_a_new_target_starts_from_nothing_and_old_reads_are_ignored() -> None:
    clock = Clock()
    m = watching(clock)
    run(m, clock, 1.9)
    other = "/storm/leader-lock/b__lock__0000000002"
    m.watch(other, clock())
    m.saw(LEADER, 7, clock())  # a late read about the old target
    assert m.decide(clock()).verdict is Verdict.NO_BEAT
    m.saw(other, 0, clock())
    run(m, clock, 1.9)
    assert m.decide(clock()).verdict is Verdict.WATCHING


def test_the_defaults_keep_the_margin_and_a_long_lease_is_refused_naming_the_rule() -> None:
    assert (DEFAULT_BEAT_INTERVAL, DEFAULT_SILENCE_WINDOW, DEFAULT_LEADER_LEASE) == (0.2, 2.0, 0.6)
    assert CLOCK_RATE_BOUND == 1e-3 and MAX_UNFENCED_ACTION == 0.2
    assert margin_holds(leader_lease=0.6, silence_window=2.0)
    assert margin_holds(leader_lease=1.79, silence_window=2.0)
    assert not margin_holds(leader_lease=1.8, silence_window=2.0)  # 2.0018 > 1.998
    BeatSettings()
    with pytest.raises(ConfigError, match=r"L\*\(1\+rho\) \+ T_op <= P\*\(1-rho\)"):
        BeatSettings(leader_lease=1.8, silence_window=2.0)
    with pytest.raises(ConfigError, match="below --leader-lease"):
        BeatSettings(interval=0.7)
    BeatSettings(leader_lease=5.0, silence_window=0)  # off: no margin to keep


def test_nimbus_serve_config_refuses_a_set_breaking_the_rule() -> None:
    base = {"zookeeper": "127.0.0.1:2181", "listen": "127.0.0.1:6627"}
    assert make_config(**base).beats == BeatSettings()
    with pytest.raises(ConfigError, match=r"T_op <= P\*\(1-rho\)"):
        make_config(**base, leader_lease=1.9, silence_window=2.0)


def claim_end(announced: float) -> float:
    """Seconds after the beat's receipt by which its sender's claim and any unfenced action
    begun under it are over, on the slowest clock the rate bound allows."""
    return (announced + MAX_UNFENCED_ACTION) * (1 + CLOCK_RATE_BOUND) / (1 - CLOCK_RATE_BOUND)


def test_the_window_follows_the_claim_the_beat_announced() -> None:
    """A leader on a slow ZooKeeper announces a longer claim: the replica behind waits that
    claim out (and T_op), never less than P; a beat of an older release (no announcement)
    gets P."""
    clock = Clock()
    m = watching(clock, announced=3.0)
    run(m, clock, claim_end(3.0) - 0.01)
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, 0.02)
    assert m.decide(clock()).verdict is Verdict.SILENT
    m = watching(clock, announced=0.4)
    run(m, clock, P - 0.01)
    assert m.decide(clock()).verdict is Verdict.WATCHING, "never less than P"
    run(m, clock, 0.02)
    assert m.decide(clock()).verdict is Verdict.SILENT
    m = watching(clock, announced=None)
    run(m, clock, P + 0.01)
    assert m.decide(clock()).verdict is Verdict.SILENT


def test_a_version_keeps_the_claim_it_announced_when_read_again() -> None:
    """Reading the same version again (with a smaller announcement, as damaged data might
    give) does not shorten its window: the version's first announcement counts."""
    clock = Clock()
    m = watching(clock, announced=3.0)
    m.saw(LEADER, 7, clock(), 0.4)
    run(m, clock, P + 0.1)
    assert m.decide(clock()).verdict is Verdict.WATCHING


def test_a_target_heard_dead_is_silent_after_its_claim_not_sooner() -> None:
    """Heard dead (link closed, reconnects failing): its silence counts after its claim and
    T_op, not P. Still its whole claim: a live leader behind a REJECT rule is heard dead
    too. Reopened, the full window is back; no announcement, no short window."""
    short = claim_end(DEFAULT_LEADER_LEASE)
    assert BeatSettings().dead_window(DEFAULT_LEADER_LEASE) == pytest.approx(short)
    assert BeatSettings().dead_window(None) is None
    assert BeatSettings(silence_window=0).dead_window(0.4) is None  # off stays off
    clock = Clock()
    m = watching(clock, announced=DEFAULT_LEADER_LEASE)
    m.peer_dead(LEADER, True)
    run(m, clock, short - 0.01)
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, 0.02)
    d = m.decide(clock())
    assert (d.verdict, d.version, d.short) == (Verdict.SILENT, 7, True)
    m.peer_dead(LEADER, False)  # a connect succeeded: alive after all
    assert m.decide(clock()).verdict is Verdict.WATCHING
    m.peer_dead("/storm/leader-lock/other", True)  # about another node: ignored
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, P - short)
    assert m.decide(clock()).short is False and m.decide(clock()).verdict is Verdict.SILENT
    m = watching(clock, announced=None)
    m.peer_dead(LEADER, True)
    run(m, clock, short + 0.1)
    assert m.decide(clock()).verdict is Verdict.WATCHING


def test_heard_dead_never_shortens_a_window_a_beat_restarted() -> None:
    """A live leader behind a REJECT rule: heard dead, but beating. Every beat restarts
    the short window, so it is never reached."""
    clock = Clock()
    m = watching(clock, announced=DEFAULT_LEADER_LEASE)
    m.peer_dead(LEADER, True)
    for version in range(8, 8 + 50):
        run(m, clock, H)
        m.saw(LEADER, version, clock(), DEFAULT_LEADER_LEASE)
        assert m.decide(clock()).verdict is Verdict.WATCHING


def test_heard_dead_never_overrides_the_stall_guards() -> None:
    """A closed connection does not make a stall of ZooKeeper (our own beats lapsed) or
    our own disconnect look like silence."""
    short = claim_end(DEFAULT_LEADER_LEASE)
    clock = Clock()
    m = watching(clock, announced=DEFAULT_LEADER_LEASE)
    m.peer_dead(LEADER, True)
    run(m, clock, short + 0.1, own_beats=False)
    assert m.decide(clock()).verdict is Verdict.OWN_BEATS_LAPSED
    m.connection(False, clock())
    assert m.decide(clock()).verdict is Verdict.DISCONNECTED
    m.watch(None, clock())
    m.watch(LEADER, clock())  # a new target starts with no evidence
    m.connection(True, clock())
    m.saw(LEADER, 7, clock(), DEFAULT_LEADER_LEASE)
    run(m, clock, short + 0.1)
    assert m.decide(clock()).verdict is Verdict.WATCHING


def test_a_leader_that_stops_on_a_uniformly_slow_zookeeper_is_still_replaced() -> None:
    """Every write takes 1.8 s (0.9 s fsyncs): our own beats come back slow but steady,
    announcing a long claim, and our own-gap rule follows it. A leader whose beat stops
    (it announced 7.2 s) is replaced after its claim, not never."""
    clock = Clock()
    m = SilenceMachine(BeatSettings())
    m.connection(True, clock())
    m.watch(LEADER, clock())
    latency, lease = 1.8, 7.2
    for _ in range(5):  # the slow spell settles: our beats ack every 0.9 s, 1.8 s late
        clock.now += 0.9
        m.own_beat(clock.now - latency, clock.now, lease)
    m.saw(LEADER, 40, clock(), lease)  # the leader's last beat, then it stops
    end = clock.now + claim_end(lease)
    while clock.now + 0.9 < end:
        clock.now += 0.9
        m.own_beat(clock.now - latency, clock.now, lease)
        assert m.decide(clock()).verdict is Verdict.WATCHING
    clock.now = end + 0.01
    m.own_beat(clock.now - latency, clock.now, lease)
    assert m.decide(clock()).verdict is Verdict.SILENT


def test_the_onset_of_a_slow_spell_is_not_silence() -> None:
    """Our own beats, acknowledged every 0.2 s, suddenly take 1.8 s: a stall of ZooKeeper
    for us as for the leader. The window starts again when ours come back."""
    clock = Clock()
    m = watching(clock, announced=DEFAULT_LEADER_LEASE)
    run(m, clock, 1.0)
    sent = clock.now
    clock.now += 1.8
    m.own_beat(sent, clock.now, DEFAULT_LEADER_LEASE)
    run(m, clock, P - 0.1)
    assert m.decide(clock()).verdict is Verdict.WATCHING


def test_a_long_own_claim_does_not_sit_through_a_stall_longer_than_the_leaders_window() -> None:
    """The SPIN model's counterexample (PLANT_OWN_GAP_LEASE): we were paused once and
    remember a long round trip, so our own beats announce 2.4 s; the leader's announce
    0.6 s (window P). ZooKeeper stalls for 2.4 s, holding everyone's beats: our own-gap
    allowance must be the leader's claim, not ours, or the stall passes for silence."""
    clock = Clock()
    m = SilenceMachine(BeatSettings())
    m.connection(True, clock())
    m.watch(LEADER, clock())
    m.own_beat(clock() - 0.01, clock(), 2.4)
    m.saw(LEADER, 7, clock(), DEFAULT_LEADER_LEASE)
    stalled_at = clock.now
    for _ in range(12):  # 2.4 s of stall: nobody's beat is answered
        clock.now += 0.2
        assert m.decide(clock()).verdict is not Verdict.SILENT
    m.own_beat(stalled_at + 0.1, clock.now, 2.4)  # the stall ends: ours comes back late
    assert m.decide(clock()).verdict is not Verdict.SILENT
    m.own_beat(clock.now - 0.01, clock.now, 2.4)  # and the next one on time
    assert m.decide(clock()).verdict is Verdict.WATCHING, "the window starts again"
