"""Silence preemption with real ``nimbus serve`` processes at Storm's T = 20 s: a paused
leader is replaced in seconds (its beat stops), a 1 s pause moves nothing.

The failover bound (5 s) is loose for a loaded CI box; the defaults put it near P = 2 s.
Waiting for expiry could never meet it at T = 20 s.
"""

from __future__ import annotations

import time
from pathlib import Path

from cluster.api import pb
from devtools.faultproxy import FaultProxy
from devtools.zkserver import ZooKeeperCluster
from nimbus.client import NimbusClient
from tests.cluster import Replica, agreed_leader, failover_while_paused, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, sync_flags
from tests.waiting import wait_until

T = 20.0
BOUND_S = 5.0
SILENCE_WINDOW = 2.0  # the default P


def _three(spawn: Spawn, zookeeper: str | None = None) -> tuple[list[Replica], Replica, int]:
    replicas = [spawn(extra=sync_flags(), session_timeout=T, zookeeper=zookeeper) for _ in range(3)]
    reply = wait_for_agreed_leader(replicas, timeout=60)
    # Every replica queued and beating before the fault: the successor must have seen a beat.
    wait_until(lambda: all(r.health() == "SERVING" for r in replicas), timeout=30)
    leader = next(r for r in replicas if r.address == reply.replica_id)
    return replicas, leader, int(reply.epoch)


def test_a_paused_leader_is_replaced_within_seconds_not_a_session_timeout(spawn: Spawn) -> None:
    replicas, leader, epoch = _three(spawn)
    new, took = failover_while_paused(leader, replicas, epoch=epoch, timeout=T * 2)
    assert new.replica_id != leader.address
    assert took < BOUND_S, f"failover after a SIGSTOP took {took:.2f}s at T={T}"
    # Woken, the old leader never claims: its lock node is gone, its lease long lapsed.
    reply = leader.leader_reply()
    assert reply is None or not reply.responder_is_leader
    assert wait_for_agreed_leader(replicas, timeout=30).replica_id == new.replica_id


def _unmoved(replicas: list[Replica], leader: Replica, epoch: int) -> None:
    """After a short fault: the same leader claims again, and keeps the same epoch for
    longer than a preemption would need (P from the last beat seen), in every sample."""
    woke = time.monotonic()
    wait_until(lambda: leader.health("nimbus.leader") == "SERVING", timeout=10)
    seen: list[tuple[str, int]] = []
    while time.monotonic() < woke + 2 * SILENCE_WINDOW:
        reply = agreed_leader(replicas)
        if reply is not None:
            seen.append((reply.replica_id, int(reply.epoch)))
        time.sleep(0.05)  # the poll period of an observation, not a synchronisation
    assert seen, "no agreed leader seen after the fault"
    assert set(seen) == {(leader.address, epoch)}, f"leadership moved: {sorted(set(seen))}"
    final = leader.leader_reply()
    assert isinstance(final, pb.GetLeaderAddressResponse) and final.responder_is_leader
    assert int(final.epoch) == epoch


def test_a_one_second_pause_of_the_leader_moves_nothing(spawn: Spawn) -> None:
    replicas, leader, epoch = _three(spawn)
    with leader.paused():
        time.sleep(1.0)  # the fault itself: a one-second pause
    _unmoved(replicas, leader, epoch)


def test_a_one_second_pause_of_zookeeper_moves_nothing(spawn: Spawn, tmp_path: Path) -> None:
    """Every beat stalls, the successor's own too: a stall of ZooKeeper is not a silent
    leader. Its own ZooKeeper: the session's shared server must not be paused."""
    zk = ZooKeeperCluster(size=1, base_dir=tmp_path / "zk").start()
    try:
        replicas, leader, epoch = _three(spawn, zookeeper=zk.connect_string)
        zk.pause(0)
        try:
            time.sleep(1.0)  # the fault itself: a one-second pause
        finally:
            zk.resume(0)
        _unmoved(replicas, leader, epoch)
    finally:
        zk.stop()  # the replicas are killed by the fixture


def test_a_read_sent_to_a_leader_cut_from_zookeeper_rides_the_failover(
    spawn: Spawn, zk_server: ZooKeeperCluster, zk_hosts: str
) -> None:
    """The cut leader still answers gRPC, but its read blocks on its ZooKeeper session for
    longer than the failover takes at T = 20 s. The client gives the read up once a
    newer term leads elsewhere, and asks there."""
    host, port = zk_server.connect_string.split(",")[0].split(":")
    chroot = zk_hosts[zk_hosts.index("/") :]
    proxy = FaultProxy(host, int(port)).start()
    try:
        first = spawn(extra=sync_flags(), session_timeout=T, zookeeper=f"{proxy.address}{chroot}")
        wait_for_agreed_leader([first], timeout=60)  # the first replica leads, through the proxy
        rest = [spawn(extra=sync_flags(), session_timeout=T) for _ in range(2)]
        reply = wait_for_agreed_leader([first, *rest], timeout=60)
        assert reply.replica_id == first.address
        wait_until(lambda: all(r.health() == "SERVING" for r in rest), timeout=30)
        with NimbusClient([r.address for r in (first, *rest)]) as client:
            client.list_topologies()  # the client knows the leader: reads go there
            proxy.blackhole()
            started = time.monotonic()
            client.list_topologies()
            took = time.monotonic() - started
        assert took < BOUND_S, f"the read took {took:.2f}s"
    finally:
        proxy.pass_through()
        proxy.stop()
