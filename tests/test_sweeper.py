"""Per-topology trees left behind by a gone topology are removed by the leader, fenced."""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.api import records
from nimbus.duties.sweeper import IN_FLIGHT_GRACE_MS, orphan_trees, resurrected_attempts, sweep
from tests.test_scheduler import PATHS
from tests.test_scheduler_duty import lead


def test_orphan_trees_are_removed_and_live_ones_kept(zk_client: KazooClient) -> None:
    _, writer = lead(zk_client, "leader:1")
    live = records.StormBase(name="live", status=records.ACTIVE)
    writer.create_record(PATHS.storm("live-1-1"), live)
    for tid in ("live-1-1", "gone-1-1"):
        zk_client.create(PATHS.assignment(tid), b"", makepath=True)
        zk_client.create(PATHS.claim(tid, 0), b"", makepath=True)
        zk_client.create(PATHS.commit(tid, "out", 7), b"", makepath=True)
        zk_client.create(PATHS.component_error(tid, "c", "e1"), b"", makepath=True)
    zk_client.create(PATHS.code_holders("abandoned-1-1"), b"", makepath=True)
    created = zk_client.exists(PATHS.code_holders("abandoned-1-1")).ctime
    later = created + IN_FLIGHT_GRACE_MS + 1  # abandoned: older than any submit waits
    assert sorted(orphan_trees(zk_client, PATHS, now_ms=later)) == sorted(
        [
            PATHS.assignment("gone-1-1"),
            PATHS.claims_of("gone-1-1"),
            PATHS.commits_of("gone-1-1"),
            PATHS.errors_of("gone-1-1"),
            PATHS.code_holders("abandoned-1-1"),
        ]
    )
    assert len(sweep(zk_client, PATHS, writer, now_ms=later)) == 5
    assert orphan_trees(zk_client, PATHS, now_ms=later) == []
    for tree in (PATHS.assignment, PATHS.claims_of, PATHS.commits_of, PATHS.errors_of):
        assert zk_client.exists(tree("live-1-1")) is not None


def test_a_submission_in_flight_keeps_its_code_folder(zk_client: KazooClient) -> None:
    """Its holders register before its record exists (the submit waits for copies): a
    sweep then, as on taking office, failed the submit with "only 1 of the required 2
    replicas hold the code" (seen in the kernel-fault suite)."""
    _, writer = lead(zk_client, "leader:1")
    zk_client.create(PATHS.code_holder("inflight-1-1", "leader:1"), b"d", makepath=True)
    zk_client.create(PATHS.code_holder("inflight-1-1", "peer:2"), b"d")
    assert orphan_trees(zk_client, PATHS) == []
    assert sweep(zk_client, PATHS, writer) == []
    assert zk_client.get_children(PATHS.code_holders("inflight-1-1")) == ["leader:1", "peer:2"]


def test_a_submit_attempt_zookeeper_brought_back_is_removed_and_the_acknowledged_kept(
    zk_client: KazooClient,
) -> None:
    """Two records of one name from one submit request: the soak's one-way cut of the
    ZooKeeper leader brought back a first attempt that was never committed (a snapshot
    taken while that server led again), next to the retry the client was answered with.
    The one the request's record names stays; the other goes, and the name follows."""
    _, writer = lead(zk_client, "leader:1")
    bases = {
        tid: records.StormBase(name="wc", status=records.ACTIVE, client_request_id="r1")
        for tid in ("wc-16-1", "wc-17-1")
    }
    for tid, base in bases.items():
        writer.create_record(PATHS.storm(tid), base)
    writer.create(PATHS.name("wc"), b"wc-16-1")  # the resurrected attempt's name node
    answered = records.RequestOutcome(
        request_id="r1", method="SubmitTopology", topology_id="wc-17-1"
    )
    writer.create(PATHS.request("r1"), answered.SerializeToString())
    # Another pair whose request record is gone (pruned): no proof, both stay.
    for tid in ("etl-1-1", "etl-2-1"):
        base = records.StormBase(name="etl", status=records.ACTIVE, client_request_id="r2")
        writer.create_record(PATHS.storm(tid), base)
        bases[tid] = base

    assert resurrected_attempts(zk_client, PATHS, bases) == [("wc-16-1", "wc-17-1")]
    removed = sweep(zk_client, PATHS, writer, storms=bases)
    assert removed == ["resurrected attempt wc-16-1 removed (wc-17-1 kept)"]
    assert sorted(zk_client.get_children(PATHS.storms)) == ["etl-1-1", "etl-2-1", "wc-17-1"]
    assert zk_client.get(PATHS.name("wc"))[0] == b"wc-17-1"
    assert sweep(zk_client, PATHS, writer, storms=bases) == [], "nothing more to remove"
