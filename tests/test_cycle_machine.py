"""The elector's cycle as a pure machine (``leader.cycle``), on a fake clock: every decision
the elector's loop acts on, without ZooKeeper or waiting; and its settings refused at
construction when a value is bad."""

from __future__ import annotations

import math

import pytest

from cluster.errors import ConfigError
from cluster.paths import Paths
from fencing.token import CancelReason
from leader.cycle import (
    RETRY_PAUSE,
    CycleMachine,
    Decision,
    OfficeOutcome,
    TermVerdict,
    Verdict,
)
from leader.settings import ERROR_BACKOFF, REQUEUE_BACKOFF, ElectorSettings, GateStage

POLL = 0.5


def machine() -> CycleMachine:
    return CycleMachine(gate_poll_interval=POLL)


def test_before_queueing_a_missing_code_is_waited_for_and_a_pass_queues_at_once() -> None:
    m = machine()
    m.gate(GateStage.BEFORE_QUEUEING, passed=False)
    assert m.decide(10.0) == Decision(Verdict.WAIT_FOR_CODE, wake_at=10.0 + POLL)
    m.gate(GateStage.BEFORE_QUEUEING, passed=True)
    assert m.decide(10.5) == Decision(Verdict.QUEUE, wake_at=10.5), "never queued: no wait"


def test_after_winning_a_missing_code_leaves_the_queue_and_a_pass_takes_office() -> None:
    m = machine()
    m.gate(GateStage.AFTER_WINNING, passed=False)
    assert m.decide(1.0) == Decision(Verdict.LEAVE), "never hold the lock waiting for code"
    m.gate(GateStage.AFTER_WINNING, passed=True)
    assert m.decide(1.0).verdict is Verdict.TAKE_OFFICE


def test_at_most_one_queue_attempt_per_requeue_backoff() -> None:
    m = machine()
    m.queued(100.0)
    m.gate(GateStage.BEFORE_QUEUEING, passed=True)
    assert m.decide(100.2) == Decision(Verdict.QUEUE, wake_at=100.0 + REQUEUE_BACKOFF)
    assert m.decide(100.0 + REQUEUE_BACKOFF + 3).wake_at == 100.0 + REQUEUE_BACKOFF + 3


@pytest.mark.parametrize(
    ("outcome", "verdict", "stale"),
    [
        (OfficeOutcome.TOOK, Verdict.SERVE, False),
        (OfficeOutcome.REFUSED, Verdict.LEAVE, True),
        (OfficeOutcome.UNKNOWN, Verdict.LEAVE, False),
        (OfficeOutcome.READ_FAILED, Verdict.FORGET, False),
    ],
)
def test_every_failed_take_office_gives_up_the_lock(
    outcome: OfficeOutcome, verdict: Verdict, stale: bool
) -> None:
    """A refusal by the quorum also accuses our server; an unknown outcome does not (the
    link dropped, nothing says our server is behind)."""
    m = machine()
    m.office(outcome)
    assert m.decide(5.0) == Decision(verdict, stale_server=stale)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (CancelReason.DISCONNECTED, Decision(Verdict.CHECK_TERM)),
        (CancelReason.LOCK_NODE_DELETED, Decision(Verdict.LEAVE, backoff=REQUEUE_BACKOFF)),
        (CancelReason.WRITE_REFUSED, Decision(Verdict.LEAVE)),
        (CancelReason.WATCH_FAILED, Decision(Verdict.LEAVE)),
        (CancelReason.ELECTOR_ERROR, Decision(Verdict.LEAVE)),
        (None, Decision(Verdict.LEAVE)),
    ],
)
def test_a_cancel_reason_resumes_or_leaves_and_a_deleted_node_backs_off(
    reason: CancelReason | None, expected: Decision
) -> None:
    m = machine()
    m.term_ended(reason, stopping=False)
    assert m.decide(7.0) == expected


def test_every_cancel_reason_has_a_decision() -> None:
    for reason in CancelReason:
        m = machine()
        m.term_ended(reason, stopping=False)
        expected = Verdict.CHECK_TERM if reason.resumable else Verdict.LEAVE
        assert m.decide(0.0).verdict is expected, reason


def test_stopping_ends_the_term_whatever_the_reason() -> None:
    for reason in [*CancelReason, None]:
        m = machine()
        m.term_ended(reason, stopping=True)
        assert m.decide(0.0) == Decision(Verdict.STOP), reason


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (TermVerdict.RESUME, Decision(Verdict.RESUME)),
        (TermVerdict.LOST, Decision(Verdict.LEAVE)),
        (TermVerdict.NOT_NAMED, Decision(Verdict.LEAVE)),
        (TermVerdict.NO_CODE, Decision(Verdict.LEAVE)),
        (None, Decision(Verdict.CHECK_TERM, backoff=RETRY_PAUSE)),
    ],
)
def test_the_check_after_a_reconnect_resumes_leaves_or_checks_again(
    verdict: TermVerdict | None, expected: Decision
) -> None:
    """None: ZooKeeper failed the check, which is more connection trouble, not a verdict:
    check again (keeping the lock node)."""
    m = machine()
    m.term_checked(verdict)
    assert m.decide(3.0) == expected


def test_a_zookeeper_hiccup_retries_soon_and_anything_else_abandons_and_backs_off() -> None:
    m = machine()
    m.failed(zookeeper=True)
    assert m.decide(1.0) == Decision(Verdict.RETRY, backoff=RETRY_PAUSE)
    m.failed(zookeeper=False)
    assert m.decide(1.0) == Decision(Verdict.ABANDON, backoff=ERROR_BACKOFF)


def test_a_whole_cycle_on_a_fake_clock() -> None:
    """Queue, win, take office, lose the connection, resume; lose the node, back off;
    queue again no sooner than REQUEUE_BACKOFF after the first attempt."""
    now = 0.0
    m = machine()
    m.gate(GateStage.BEFORE_QUEUEING, passed=True)
    assert m.decide(now).verdict is Verdict.QUEUE
    m.queued(now)
    now += 0.1
    m.gate(GateStage.AFTER_WINNING, passed=True)
    assert m.decide(now).verdict is Verdict.TAKE_OFFICE
    m.office(OfficeOutcome.TOOK)
    assert m.decide(now).verdict is Verdict.SERVE
    m.term_ended(CancelReason.DISCONNECTED, stopping=False)
    assert m.decide(now).verdict is Verdict.CHECK_TERM
    m.term_checked(TermVerdict.RESUME)
    assert m.decide(now).verdict is Verdict.RESUME
    now += 0.3
    m.term_ended(CancelReason.LOCK_NODE_DELETED, stopping=False)
    assert m.decide(now) == Decision(Verdict.LEAVE, backoff=REQUEUE_BACKOFF)
    m.gate(GateStage.BEFORE_QUEUEING, passed=True)
    assert m.decide(now).wake_at == REQUEUE_BACKOFF, "one attempt per REQUEUE_BACKOFF"


def test_the_machine_refuses_a_poll_interval_that_would_spin() -> None:
    with pytest.raises(ValueError, match="poll interval"):
        CycleMachine(gate_poll_interval=0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("replica_id", ""),
        ("session_timeout", 0.0),
        ("session_timeout", -1.0),
        ("session_timeout", math.nan),
        ("gate_poll_interval", 0.0),
        ("epochs_kept", 0),
    ],
)
def test_elector_settings_refuse_a_bad_value_and_name_it(field: str, value: object) -> None:
    good: dict[str, object] = {
        "paths": Paths("/storm"),
        "replica_id": "me:1",
        "session_timeout": 4.0,
        "gate_poll_interval": 0.5,
        "epochs_kept": 50,
    }
    ElectorSettings(**good)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=f"ElectorSettings.{field}"):
        ElectorSettings(**{**good, field: value})  # type: ignore[arg-type]
