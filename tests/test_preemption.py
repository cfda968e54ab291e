"""Fenced preemption: a leader whose process is gone is replaced in about a second, not a
session timeout; a leader that is only paused is not preempted.

Figures (failover p50/p99 with and without preemption) are in ``bench/leader.py``: 0.6 s at
both T = 4 s and 20 s on this machine. The bound here is the same for both timeouts and
leaves room for a loaded 2-core CI box; waiting for expiry could never meet it at T = 20 s.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from leader.discovery import LeaderInfo
from leader.preemption import Preemptor, PreemptSettings, Probe
from tests.cluster import Replica, failover_while_paused, wait_for_agreed_leader
from tests.replica_fixtures import ROOT, Spawn, sync_flags
from tests.test_scheduler import lead
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


class _StaleCache:
    """The leader cache as a replica's watches left it after a disconnect: the leader's
    registration remembered with a session that no longer holds it."""

    def __init__(self, leader: LeaderInfo, queue: list[str], stale_session: int) -> None:
        self._leader, self._queue, self._stale = leader, queue, stale_session

    def leader(self) -> LeaderInfo:
        return self._leader

    def lock_queue(self) -> list[str]:
        return self._queue

    def nimbus_session(self, address: str) -> int:
        return self._stale


def test_a_stale_cached_registration_never_deposes_a_live_leader(
    zk_client: KazooClient, zk_hosts: str
) -> None:
    """Seen after a ZooKeeper leader election: the successor's cache still named an old
    session for the leader's registration, read it as "a new process serves that
    address" and deleted the lock node of a live leader. ZooKeeper itself is the evidence."""
    lock, writer = lead(zk_client, "leader:1")
    lock_node = f"{lock.path}/{lock.node}"
    zk_client.create(PATHS.nimbus("leader:1"), b"", ephemeral=True, makepath=True)
    successor = make_kazoo_client(zk_hosts, session_timeout=10.0)
    successor.start(timeout=30)
    try:
        mine = successor.create(f"{lock.path}/x__lock__", b"", ephemeral=True, sequence=True)
        queue = sorted(successor.get_children(lock.path), key=lambda n: n[-10:])
        leader = LeaderInfo("leader:1", writer.token.epoch, lock_node, 0)
        preemptor = Preemptor(
            successor, PATHS, "successor:2",
            _StaleCache(leader, queue, stale_session=0x7777),  # type: ignore[arg-type]
            lambda: mine, PreemptSettings(), timeout=5, probe=lambda _a, _t: Probe.OPEN,
        )  # fmt: skip
        assert preemptor.step() is None
        assert zk_client.exists(lock_node) is not None, "a live leader's lock node was deleted"
    finally:
        successor.stop()
        successor.close()
        lock.release()
