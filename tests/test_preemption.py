"""Fenced preemption: a leader whose process is gone is replaced in about a second, not a
session timeout (its beat silent for its claim, its link closed and reconnects failing); a
leader that is only paused waits for its session when silence preemption is off.

Figures (failover p50/p99 with and without preemption) are in ``bench/leader_failover.py
--preemption``: 0.6 s at both T = 4 s and 20 s on this machine. The bound here is the same
for both timeouts and leaves room for a loaded 2-core CI box; waiting for expiry could never
meet it at T = 20 s.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from cluster.paths import Paths
from tests.cluster import Replica, failover_while_paused, wait_for_agreed_leader
from tests.replica_fixtures import ROOT, Spawn, sync_flags
from tests.waiting import wait_until

PATHS = Paths(ROOT)
#: Kill to an agreed new leader (whose take-office multi-op is its first fenced write).
BOUND_S = 5.0  # loose for a loaded CI machine; waiting for expiry would take T = 20 s


def _three(spawn: Spawn, session_timeout: float) -> list[Replica]:
    replicas = [spawn(extra=sync_flags(), session_timeout=session_timeout) for _ in range(3)]
    wait_for_agreed_leader(replicas, timeout=60)
    return replicas


def _leader(replicas: list[Replica]) -> tuple[Replica, int]:
    reply = wait_for_agreed_leader(replicas, timeout=60)
    return next(r for r in replicas if r.address == reply.replica_id), int(reply.epoch)


@pytest.mark.parametrize("session_timeout", [4.0, 20.0])
def test_a_killed_leader_is_preempted_long_before_its_session_expires(
    spawn: Spawn, session_timeout: float
) -> None:
    replicas = _three(spawn, session_timeout)
    leader, epoch = _leader(replicas)
    rest = [r for r in replicas if r is not leader]
    killed_at = time.monotonic()
    leader.stop(signal.SIGKILL)
    new = wait_for_agreed_leader(rest, timeout=session_timeout * 3, newer_than=epoch)
    took = time.monotonic() - killed_at
    assert new.replica_id != leader.address
    assert took < BOUND_S, f"failover took {took:.2f}s at T={session_timeout}"


def test_a_leader_restarted_in_place_is_preempted_by_its_identity(
    spawn: Spawn, tmp_path: Path
) -> None:
    """Killed and restarted at once on the same address (as a pod is): the port answers,
    but /nimbuses names another session than the leader's lock node."""
    session_timeout = 20.0
    replicas = _three(spawn, session_timeout)
    leader, epoch = _leader(replicas)
    killed_at = time.monotonic()
    leader.stop(signal.SIGKILL)
    again = Replica(
        leader.zookeeper, leader.root, tmp_path, port=leader.port, code_dir=leader.code_dir,
        session_timeout=session_timeout, extra=leader.extra,
    ).start()  # fmt: skip
    try:
        rest = [r for r in replicas if r is not leader]
        new = wait_for_agreed_leader([*rest, again], timeout=60, newer_than=epoch)
        took = time.monotonic() - killed_at
        assert took < BOUND_S, f"failover took {took:.2f}s at T={session_timeout}"
        assert new.epoch > epoch
    finally:
        again.stop(signal.SIGKILL)


def test_a_paused_leader_is_not_preempted_by_the_probe(spawn: Spawn) -> None:
    """SIGSTOP: the kernel still accepts connections on its port and its session is the
    one registered at its address: no evidence for the probe. Silence preemption (off
    here, see ``tests/test_silence.py``) is what replaces a paused leader in seconds."""
    session_timeout = 4.0
    replicas = [
        spawn(extra=(*sync_flags(), "--silence-window", "0"), session_timeout=session_timeout)
        for _ in range(3)
    ]
    leader, epoch = _leader(replicas)
    new, took = failover_while_paused(leader, replicas, epoch=epoch, timeout=session_timeout * 4)
    assert new.replica_id != leader.address
    assert took >= session_timeout * 0.8, f"a pause was preempted after {took:.2f}s"
    wait_until(lambda: leader.health() == "SERVING", timeout=30, message="the old leader back")
