"""Per-topology trees left behind by a gone topology are removed by the leader, fenced."""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.api import records
from nimbus.sweeper import orphan_trees, sweep
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
    assert sorted(orphan_trees(zk_client, PATHS)) == sorted(
        [
            PATHS.assignment("gone-1-1"),
            PATHS.claims_of("gone-1-1"),
            PATHS.commits_of("gone-1-1"),
            PATHS.errors_of("gone-1-1"),
            PATHS.code_holders("abandoned-1-1"),
        ]
    )
    assert len(sweep(zk_client, PATHS, writer)) == 5
    assert orphan_trees(zk_client, PATHS) == []
    for tree in (PATHS.assignment, PATHS.claims_of, PATHS.commits_of, PATHS.errors_of):
        assert zk_client.exists(tree("live-1-1")) is not None
