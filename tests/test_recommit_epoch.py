"""A retried change recommits its first attempt's writes stamped with the term that
writes them again (nimbus/duties/confirm.py), on a real ZooKeeper.

The chaos soak's S1 check ("every record was applied inside the term of the epoch it
carries") found a topology record carrying epoch 3 written in epoch 4's term: a retry
answered by the next leader wrote the first attempt's bytes again, epoch and all."""

from __future__ import annotations

import uuid

from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from cluster.api import records
from cluster.paths import Paths
from fencing import Create, FencedWriter, LeadershipToken
from fencing.office import take_office
from nimbus.duties.confirm import recall_committed
from nimbus.duties.requests import remember


def _term(client: KazooClient, paths: Paths) -> tuple[Lock, FencedWriter]:
    lock = Lock(client, paths.leader_lock, identifier="me:1")
    assert lock.acquire(timeout=10)
    node = f"{lock.path}/{lock.node}"
    epoch = take_office(client, paths, lock_node=node, holder="me:1", now_ms=lambda: 0, timeout=5)
    return lock, FencedWriter(client, LeadershipToken(node, epoch), timeout=5)


def test_a_recommitted_topology_record_carries_the_term_that_wrote_it_again(
    zk_client: KazooClient,
) -> None:
    paths = Paths(f"/restamp-{uuid.uuid4().hex[:8]}")
    confirmed = paths.confirmation("x").rpartition("/")[0]
    for folder in (paths.leader_lock, paths.epochs, paths.storms, paths.requests, confirmed):
        zk_client.ensure_path(folder)
    first_lock, first = _term(zk_client, paths)
    tid, rid, epoch = "wc-1-1", uuid.uuid4().hex, first.token.epoch
    base = records.StormBase(name="wc", status=records.ACTIVE, epoch=epoch)
    first.batch(
        [
            Create(paths.storm(tid), base.SerializeToString()),
            *remember(paths, rid, method="SubmitTopology", topology_id=tid, epoch=epoch),
        ]
    )
    first_lock.release()  # the term ends with the client's reply lost
    _, second = _term(zk_client, paths)
    assert second.token.epoch == first.token.epoch + 1

    outcome = recall_committed(
        zk_client, paths, second, rid, effects=lambda o: [paths.storm(o.topology_id)]
    )

    assert outcome is not None and outcome.epoch == first.token.epoch  # the first outcome
    data, stat = zk_client.get(paths.storm(tid))
    term_start = zk_client.exists(paths.epoch(second.token.epoch))
    assert term_start is not None and stat.mzxid > term_start.czxid  # written again, now
    assert records.StormBase.FromString(data).epoch == second.token.epoch
    assert records.StormBase.FromString(data).name == "wc"
