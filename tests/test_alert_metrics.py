"""The metrics the alert rules read (deploy/prometheus/rules.yaml), scraped from real
replicas: readiness, beat latency and failing topologies, with values that make sense."""

from __future__ import annotations

import signal
import time
from functools import partial
from pathlib import Path

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths, worker_name
from fencing import CancelReason, LeadershipToken
from nimbus.client import NimbusClient
from nimbus.duties.failing import CODE_MISSING, REASONS, WORKER, count_failing
from nimbus.metrics import ReplicaMetrics
from tests.cluster import free_port, wait_for_agreed_leader
from tests.replica_fixtures import ROOT, Spawn, package, submit, sync_flags
from tests.scrape import Samples, scrape, value
from tests.waiting import wait_until

PATHS = Paths(ROOT)
FAILING = "nimbus_topologies_failing"
BEATS = "nimbus_beat_latency_seconds"


def _failing(samples: Samples) -> dict[str, float]:
    return {dict(labels)["reason"]: v for (name, labels), v in samples.items() if name == FAILING}


def _beats_counted(port: int, at_least: float) -> Samples:
    """The scrape, once it counts ``at_least`` beats (empty, so falsy, before)."""
    samples = scrape(port)[1]
    return samples if value(samples, f"{BEATS}_count") >= at_least else {}


def test_ready_beat_latency_and_failing_topologies_on_live_replicas(
    spawn: Spawn, tmp_path: Path, zk_client: KazooClient
) -> None:
    ports = [free_port(), free_port()]
    replicas = [spawn(extra=(*sync_flags(), "--metrics-port", str(p))) for p in ports]
    first = wait_for_agreed_leader(replicas, timeout=30)
    leader_i = next(i for i, r in enumerate(replicas) if r.address == first.replica_id)
    leader, follower = replicas[leader_i], replicas[1 - leader_i]
    on_leader, on_follower = ports[leader_i], ports[1 - leader_i]

    # Every queued replica beats every 0.2 s; a local ZooKeeper answers in milliseconds.
    for port in (on_leader, on_follower):
        samples = wait_until(partial(_beats_counted, port, 5), timeout=15)
        assert value(samples, "nimbus_ready") == 1
        count = value(samples, f"{BEATS}_count")
        assert value(samples, f"{BEATS}_bucket", le="+Inf") == count
        assert 0 < value(samples, f"{BEATS}_sum") / count < 0.5
        buckets = sorted(
            (float(dict(labels)["le"]), v)
            for (name, labels), v in samples.items()
            if name == f"{BEATS}_bucket"
        )
        assert [v for _, v in buckets] == sorted(v for _, v in buckets), "cumulative"

    # The leader's scheduler exports both reasons from its first pass; a follower none.
    wait_until(lambda: _failing(scrape(on_leader)[1]) == {WORKER: 0, CODE_MISSING: 0})
    assert _failing(scrape(on_follower)[1]) == {}

    path, _ = package(tmp_path, "broken")
    with NimbusClient([r.address for r in replicas]) as client:
        tid = submit(client, path, "broken").topology_id
    # What a supervisor writes when its worker failed and no batch was committed since.
    beat = records.WorkerHeartbeat(
        topology_id=tid,
        supervisor_id="sup-a",
        time_ms=int(time.time() * 1000),
        last_error="ValueError: short row",
        failures_in_a_row=1,
    )
    slot = PATHS.workerbeat(tid, worker_name("sup-a", 0))
    zk_client.create(slot, beat.SerializeToString(), makepath=True)
    wait_until(
        lambda: _failing(scrape(on_leader)[1]) == {WORKER: 1, CODE_MISSING: 0},
        timeout=15,
        message="the leader to count the topology whose worker failed",
    )
    assert _failing(scrape(on_follower)[1]) == {}

    # After a handover the old leader is gone and the new one exports its own figure.
    assert leader.stop(signal.SIGTERM) == 0, leader.log_tail()
    wait_for_agreed_leader([follower], timeout=30, newer_than=first.epoch)
    wait_until(lambda: set(_failing(scrape(on_follower)[1])) == set(REASONS), timeout=15)
    assert value(scrape(on_follower)[1], "nimbus_ready") == 1


def test_failing_counts_follow_the_status_and_the_workers_heartbeats() -> None:
    def base(status: records.TopologyStatus) -> records.StormBase:
        return records.StormBase(name="t", status=status)

    failed = [records.WorkerHeartbeat(failures_in_a_row=1)]
    healthy = [records.WorkerHeartbeat(failures_in_a_row=0, restarts=3)]
    storms = {
        "active-failed": base(records.ACTIVE),
        "inactive-failed": base(records.INACTIVE),
        "active-healthy": base(records.ACTIVE),
        "killed-failed": base(records.KILLED),  # killed: its last heartbeats do not count
        "lost": base(records.CODE_MISSING),
        "no-beats": base(records.ACTIVE),
    }
    beats = {
        "active-failed": failed,
        "inactive-failed": failed,
        "active-healthy": healthy,
        "killed-failed": failed,
        "gone": failed,  # no record: not a topology any more
    }
    assert count_failing(storms, beats) == {WORKER: 2, CODE_MISSING: 1}
    assert count_failing({}, {}) == {WORKER: 0, CODE_MISSING: 0}


def replica_metrics(*, leading: bool) -> ReplicaMetrics:
    """The metrics of a replica that is not running: leading (epoch 1, connected, ready)
    or not (epoch 0, none of those), no package missing."""
    return ReplicaMetrics(
        replica_id="r:1",
        is_leader=lambda: leading,
        leader_epoch=lambda: int(leading),
        connected=lambda: leading,
        missing_packages=lambda: 0,
        ready=lambda: leading,
    )


def test_a_deposed_leaders_last_count_is_not_exported() -> None:
    metrics = replica_metrics(leading=False)
    term = LeadershipToken("/storm/leader-lock/n-1", epoch=3)
    metrics.topologies_failing({WORKER: 2, CODE_MISSING: 0}, term)
    exported = {
        s.labels["reason"]: s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == FAILING
    }
    assert exported == {WORKER: 2, CODE_MISSING: 0}
    term.cancel(CancelReason.LOCK_NODE_DELETED)
    assert not [f for f in metrics.registry.collect() if f.name == FAILING]
    assert metrics.registry.get_sample_value("nimbus_ready") == 0
