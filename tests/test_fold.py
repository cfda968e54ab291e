"""A silent holder's preemption takes office in the same multi-op (``leader.fold``): on a
slow disk each write waits about two fsyncs, and a delete then a take-office were two in a
row. What ZooKeeper itself logged is the evidence: one transaction deletes the paused
leader's lock node and creates the next epoch."""

from __future__ import annotations

from pathlib import Path

from devtools.zkserver import ZooKeeperCluster
from tests.chaos.txnlog import read_txns, s1_txnlog
from tests.cluster import failover_while_paused, wait_for_agreed_leader
from tests.replica_fixtures import ROOT, Spawn, sync_flags
from tests.waiting import wait_until

T = 20.0


def test_a_paused_leader_is_deleted_and_succeeded_in_one_transaction(
    spawn: Spawn, tmp_path: Path
) -> None:
    zk = ZooKeeperCluster(size=1, base_dir=tmp_path / "zk").start()
    try:
        replicas = [
            spawn(extra=sync_flags(), session_timeout=T, zookeeper=zk.connect_string)
            for _ in range(3)
        ]
        reply = wait_for_agreed_leader(replicas, timeout=60)
        wait_until(lambda: all(r.health() == "SERVING" for r in replicas), timeout=30)
        leader = next(r for r in replicas if r.address == reply.replica_id)
        new, _ = failover_while_paused(leader, replicas, epoch=int(reply.epoch), timeout=2 * T)
        epoch_node = f"{ROOT}/epochs/{int(new.epoch)}"
        txns = read_txns(zk)
        took = [t for t in txns if ("create", epoch_node) in t.ops]
        assert len(took) == 1, f"{epoch_node} created {len(took)} times"
        deleted = [path for op, path in took[0].ops if op == "delete"]
        assert any("/leader-lock/" in path for path in deleted), (
            f"the take-office transaction deleted no lock node: {took[0].ops}"
        )
        assert any("/beats/" in path for path in deleted), took[0].ops
        # The audit of ZooKeeper's log judges it a write of the new term, as every other.
        assert s1_txnlog(txns, ROOT) == []
        # The term serves as any other: the new leader keeps claiming once the old wakes.
        assert wait_for_agreed_leader(replicas, timeout=30).replica_id == new.replica_id
    finally:
        zk.stop()  # the replicas are killed by the fixture
