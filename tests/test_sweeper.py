"""Per-topology trees left behind by a gone topology are removed by the leader, fenced."""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.api import records
from nimbus.duties.sweeper import IN_FLIGHT_GRACE_MS, orphan_trees, sweep
from tests.test_scheduler import PATHS, lead


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
