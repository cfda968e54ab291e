"""``leader.preempt_reads.ReadsAhead``: when the preemption's reads go out before a window's
end (two of our beats' round trips), and which reads a preemption may use."""

from __future__ import annotations

from typing import cast

from kazoo.interfaces import IAsyncResult

from leader.preempt_reads import LEAD_MAX, PreemptReads, ReadsAhead

TARGET = "/storm/leader-lock/x__lock__0000000000"


def _reads(version: int, sent_at: float) -> PreemptReads:
    sent = cast(IAsyncResult, object())  # never waited on here
    return PreemptReads(TARGET, version, sent_at, sent, sent, sent, None, None)


def test_reads_go_out_two_round_trips_before_the_window_ends_once_per_version() -> None:
    ahead = ReadsAhead()
    ahead.beat_acked(sent=10.0, acked=11.8)  # a slow disk: 1.8 s round trips
    assert not ahead.due(TARGET, 5, window_end=20.0, now=16.0)
    assert ahead.due(TARGET, 5, window_end=20.0, now=16.5)
    ahead.hold(_reads(5, sent_at=16.5))
    assert not ahead.due(TARGET, 5, window_end=20.0, now=17.0)  # sent already
    assert ahead.due(TARGET, 6, window_end=21.0, now=17.5)  # a new version: its own


def test_the_lead_is_bounded_and_forgets_a_long_round_trip() -> None:
    ahead = ReadsAhead()
    ahead.beat_acked(sent=0.0, acked=30.0)  # a pause's round trip
    assert ahead.lead() == LEAD_MAX
    for n in range(200):
        ahead.beat_acked(sent=100.0 + n, acked=100.0 + n + 0.002)
    assert ahead.lead() < 0.01


def test_a_preemption_uses_only_fresh_reads_of_its_own_target_and_version_once() -> None:
    ahead = ReadsAhead()
    ahead.beat_acked(sent=0.0, acked=1.0)
    ahead.hold(_reads(5, sent_at=10.0))
    assert ahead.take(TARGET, 6, now=11.0) is None  # another version: sent afresh
    ahead.hold(_reads(5, sent_at=10.0))
    assert ahead.take(TARGET, 5, now=15.0) is None  # older than four round trips
    ahead.hold(_reads(5, sent_at=10.0))
    reads = ahead.take(TARGET, 5, now=12.0)
    assert reads is not None and reads.version == 5
    assert ahead.take(TARGET, 5, now=12.0) is None  # once
