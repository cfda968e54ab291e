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

P, GAP, H = 2.0, 0.8, 0.2
LEADER = "/storm/leader-lock/a__lock__0000000001"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watching(clock: Clock, closed_window: float | None = None) -> SilenceMachine:
    """Connected, our own beats committing, the leader's beat seen at version 7."""
    m = SilenceMachine(window=P, own_gap=GAP, closed_window=closed_window)
    m.connection(True, clock())
    m.own_beat(clock(), clock())
    m.watch(LEADER, clock())
    m.saw(LEADER, 7, clock())
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
    assert (DEFAULT_BEAT_INTERVAL, DEFAULT_SILENCE_WINDOW, DEFAULT_LEADER_LEASE) == (0.2, 2.0, 0.8)
    assert CLOCK_RATE_BOUND == 1e-3 and MAX_UNFENCED_ACTION == 1.0
    assert margin_holds(leader_lease=0.8, silence_window=2.0)
    assert not margin_holds(leader_lease=1.0, silence_window=2.0)  # 2.001 > 1.998
    BeatSettings()
    with pytest.raises(ConfigError, match=r"L\*\(1\+rho\) \+ T_op <= P\*\(1-rho\)"):
        BeatSettings(leader_lease=1.0, silence_window=2.0)
    with pytest.raises(ConfigError, match="below --leader-lease"):
        BeatSettings(interval=0.9)
    BeatSettings(leader_lease=5.0, silence_window=0)  # off: no margin to keep


def test_nimbus_serve_config_refuses_a_set_breaking_the_rule() -> None:
    base = {"zookeeper": "127.0.0.1:2181", "listen": "127.0.0.1:6627"}
    assert make_config(**base).beats == BeatSettings()
    with pytest.raises(ConfigError, match=r"T_op <= P\*\(1-rho\)"):
        make_config(**base, leader_lease=1.5, silence_window=2.0)


CLOSED_WINDOW = BeatSettings().closed_window


def test_a_target_heard_dead_is_silent_after_the_short_window_only() -> None:
    """The held connection to the leader closed by its kernel (a killed container, whose
    address then goes silent): its silence counts after L*(1+rho) + H, not P; its claim
    lease is over by then. Reopened, the full window is back."""
    assert BeatSettings(leader_lease=0.8, interval=0.2).closed_window == pytest.approx(
        (0.8 * (1 + CLOCK_RATE_BOUND) + 0.2) / (1 - CLOCK_RATE_BOUND)
    )
    assert BeatSettings(silence_window=0).closed_window == 0.0  # off stays off
    clock = Clock()
    m = watching(clock, CLOSED_WINDOW)
    m.peer_closed(LEADER, True)
    run(m, clock, CLOSED_WINDOW - 0.01)
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, 0.01)
    d = m.decide(clock())
    assert (d.verdict, d.version, d.short) == (Verdict.SILENT, 7, True)
    m.peer_closed(LEADER, False)  # a connect succeeded: alive after all
    assert m.decide(clock()).verdict is Verdict.WATCHING
    m.peer_closed("/storm/leader-lock/other", True)  # about another node: ignored
    assert m.decide(clock()).verdict is Verdict.WATCHING
    run(m, clock, P - CLOSED_WINDOW)
    assert m.decide(clock()).short is False and m.decide(clock()).verdict is Verdict.SILENT


def test_heard_dead_never_overrides_the_stall_guards() -> None:
    """A closed connection does not make a stall of ZooKeeper (our own beats lapsed) or
    our own disconnect look like silence."""
    clock = Clock()
    m = watching(clock, CLOSED_WINDOW)
    m.peer_closed(LEADER, True)
    run(m, clock, CLOSED_WINDOW + 0.1, own_beats=False)
    assert m.decide(clock()).verdict is Verdict.OWN_BEATS_LAPSED
    m.connection(False, clock())
    assert m.decide(clock()).verdict is Verdict.DISCONNECTED
    m.watch(None, clock())
    m.watch(LEADER, clock())  # a new target starts with no evidence
    m.connection(True, clock())
    m.saw(LEADER, 7, clock())
    run(m, clock, CLOSED_WINDOW + 0.1)
    assert m.decide(clock()).verdict is Verdict.WATCHING
