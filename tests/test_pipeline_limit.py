"""``leader.heartbeat.pipeline_limit``: how long the oldest beat may stay in flight before
no more are sent. Slow but answering (our other session got an answer since that beat
went out) lets beats go on longer; lost replies stop them at the floor."""

from __future__ import annotations

from leader.heartbeat import pipeline_limit
from leader.settings import LEASE_PER_LATENCY, PIPELINE_ANSWERED, PIPELINE_FLOOR


def test_lost_replies_stop_beats_at_the_floor_and_an_answer_lets_them_go_on() -> None:
    assert pipeline_limit(0.002, answered=False) == PIPELINE_FLOOR
    assert pipeline_limit(0.002, answered=True) == PIPELINE_ANSWERED > PIPELINE_FLOOR


def test_long_round_trips_remembered_win_over_both_floors() -> None:
    assert pipeline_limit(4.0, answered=False) == LEASE_PER_LATENCY * 4.0
    assert pipeline_limit(4.0, answered=True) == LEASE_PER_LATENCY * 4.0
