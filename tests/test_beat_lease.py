"""``leader.beat_lease`` on a fake clock: the claim a beat announces follows the latency."""

from __future__ import annotations

import pytest

from leader.beat_lease import BeatLease
from leader.settings import LATENCY_MEMORY, LEASE_PER_LATENCY, LEASE_PER_WAIT, ONSET_WAIT


def test_a_fast_zookeeper_gets_the_base_claim() -> None:
    m = BeatLease(base=0.4, ceiling=13.0)
    for i in range(10):
        sent = i * 0.2
        assert m.announce(sent) == pytest.approx(0.4)
        m.answered(sent, sent + 0.005)


def test_the_claim_grows_with_a_beat_still_in_flight_before_any_slow_reply() -> None:
    """The onset of a slow disk: the first slow reply comes 2 fsyncs late, so the beats
    sent meanwhile must already announce more, from the age of the oldest in flight."""
    m = BeatLease(base=0.4, ceiling=13.0)
    m.announce(0.0)  # stuck
    assert m.announce(0.6) == pytest.approx(LEASE_PER_WAIT * 0.6)
    assert m.in_flight() == 2


def test_the_claim_follows_remembered_latency_and_shrinks_after_the_memory() -> None:
    m = BeatLease(base=0.4, ceiling=13.0)
    m.announce(0.0)
    m.answered(0.0, 1.8)
    assert m.latency(2.0) == pytest.approx(1.8)
    assert m.announce(2.0) == pytest.approx(LEASE_PER_LATENCY * 1.8)
    m.answered(2.0, 2.01)
    later = 1.8 + LATENCY_MEMORY + 1
    # never ends before the earlier announcement (2.0 + 5.4 = 7.4 < later): base again
    assert m.announce(later) == pytest.approx(0.4)


def test_an_announcement_never_ends_before_an_earlier_one() -> None:
    """A claim's end only moves forward with the version: the last version seen bounds the
    claims made on every earlier one."""
    m = BeatLease(base=0.4, ceiling=13.0, memory=1.0)
    m.announce(0.0)
    m.answered(0.0, 1.0)  # latency 1.0: the next claims 3.0
    first = m.announce(1.0)
    m.answered(1.0, 1.01)
    second = m.announce(2.5)  # the slow sample is forgotten: base would end at 2.9
    assert 2.5 + second >= 1.0 + first


def test_the_ceiling_bounds_the_claim_and_lost_beats_are_forgotten() -> None:
    m = BeatLease(base=0.4, ceiling=2.0)
    m.announce(0.0)
    assert m.announce(10.0) == pytest.approx(2.0)
    m.forget_in_flight()
    assert m.in_flight() == 0 and m.oldest_in_flight_age(11.0) == 0.0
    with pytest.raises(ValueError):
        BeatLease(base=0.0, ceiling=1.0)


def test_a_steady_slow_spell_announces_round_trips_and_an_onset_announces_the_wait() -> None:
    """Once slow round trips are known, the oldest beat's wait (about one round trip) does
    not bring the onset factor back: it would make a stopped leader wait much longer."""
    m = BeatLease(base=0.6, ceiling=13.0)
    m.announce(0.0)
    m.answered(0.0, 1.8)
    m.announce(2.0)  # in flight from here
    assert m.announce(3.5) == pytest.approx(LEASE_PER_LATENCY * 1.8)
    assert m.announce(2.0 + ONSET_WAIT * 1.8 + 0.5) == pytest.approx(
        LEASE_PER_WAIT * (ONSET_WAIT * 1.8 + 0.5)
    ), "a wait clearly past every round trip remembered: a new onset"
