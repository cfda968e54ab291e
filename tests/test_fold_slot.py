"""``leader.fold.Fold``: the elector waits for a preemption's multi-op in flight for its own
lock node, takes a term begun for it once, and nothing begun for another node."""

from __future__ import annotations

import itertools
import threading

from leader.fold import Fold, FoldedOffice

NODE = "/storm/leader-lock/x__lock__0000000001"
OTHER = "/storm/leader-lock/y__lock__0000000002"


def test_the_elector_waits_for_the_multi_op_in_flight_and_takes_its_term_once() -> None:
    fold = Fold()
    fold.begin(NODE)
    taken: list[FoldedOffice | None] = []
    waiting = threading.Thread(target=lambda: taken.append(fold.take(NODE, timeout=30)))
    waiting.start()
    office = FoldedOffice(NODE, 7, sent=1.0, lease=0.6)
    fold.end(office)
    waiting.join(timeout=30)
    assert taken == [office]
    assert fold.take(NODE, timeout=0) is None  # once


def test_a_failed_fold_or_another_nodes_term_gives_nothing() -> None:
    fold = Fold()
    fold.begin(NODE)
    fold.end(None)
    assert fold.take(NODE, timeout=0) is None
    fold.begin(OTHER)
    fold.end(FoldedOffice(OTHER, 3, sent=0.0, lease=0.6))
    assert fold.take(NODE, timeout=0) is None
    assert fold.take(OTHER, timeout=0) is None  # the stale one was dropped


def test_a_multi_op_whose_outcome_never_comes_is_waited_for_no_longer_than_asked() -> None:
    readings = itertools.count(0.0, 0.6)  # each look at the clock, 0.6 s later
    fold = Fold(clock=lambda: next(readings))
    fold.begin(NODE)
    assert fold.take(NODE, timeout=1.0) is None
    assert not fold.taken(NODE, timeout=1.0)
