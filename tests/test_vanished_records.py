"""An acknowledged outcome outlives the transaction it was first read from.

ZooKeeper can show a transaction that its quorum never committed and later lose it
(ZOOKEEPER-4837; ``docs/zookeeper-divergence.md``). Here a real replica acknowledges a
retry from the request record its first attempt wrote; then, with a raw client, the test
undoes exactly what that first transaction wrote, as a ghost vanishes: nodes it created
are deleted, a node whose last change has its zxid gets its earlier data back, what later
transactions wrote stays. The acknowledged outcome must stay in force, and one more retry
with the same request id must get the same answer.
"""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import pb, records
from cluster.paths import Paths
from nimbus.client import NimbusClient
from tests.replica_fixtures import submit

PATHS = Paths("/storm")


def _tree(zk: KazooClient, root: str) -> list[str]:
    """Every path under ``root``, parents before children."""
    found, todo = [], [root]
    while todo:
        path = todo.pop()
        try:
            children = zk.get_children(path)
        except NoNodeError:
            continue
        found.append(path)
        todo += [f"{path.rstrip('/')}/{c}" for c in children]
    return found


def _snapshot(zk: KazooClient) -> dict[str, bytes]:
    data = {}
    for path in _tree(zk, PATHS.root):
        try:
            data[path] = zk.get(path)[0]
        except NoNodeError:
            continue
    return data


def _undo(zk: KazooClient, zxid: int, before: dict[str, bytes]) -> list[str]:
    """Undo what transaction ``zxid`` wrote; returns what was undone, for the message."""
    undone = []
    for path in reversed(_tree(zk, PATHS.root)):  # children before parents
        stat = zk.exists(path)
        if stat is None:
            continue
        if stat.czxid == zxid:
            zk.delete(path, recursive=True)
            undone.append(f"deleted {path}")
        elif stat.mzxid == zxid:
            zk.set(path, before[path])
            undone.append(f"restored {path}")
    return undone


def test_a_retried_kill_stays_killed_when_its_first_transaction_vanishes(
    lone_client: tuple[NimbusClient, Path], zk_client: KazooClient
) -> None:
    client, path = lone_client
    topology = submit(client, path, "wc").topology_id
    before = _snapshot(zk_client)
    kill = pb.KillTopologyRequest(name="wc", wait_s=600, client_request_id="req-kill-ghost")
    first = client.call_leader("KillTopology", kill)
    ghost = zk_client.exists(PATHS.request("req-kill-ghost"))
    assert ghost is not None and first.status == records.KILLED
    retry = client.call_leader("KillTopology", kill)  # answered from the record
    assert (retry.topology_id, retry.status) == (topology, records.KILLED)

    undone = _undo(zk_client, ghost.czxid, before)
    assert f"deleted {PATHS.request('req-kill-ghost')}" in undone

    base = records.StormBase.FromString(zk_client.get(PATHS.storm(topology))[0])
    assert base.status == records.KILLED, f"the acknowledged kill was undone: {undone}"
    again = client.call_leader("KillTopology", kill)
    assert (again.topology_id, again.epoch) == (first.topology_id, first.epoch)


def test_a_retried_submit_keeps_its_one_topology_when_its_first_transaction_vanishes(
    lone_client: tuple[NimbusClient, Path], zk_client: KazooClient
) -> None:
    client, path = lone_client
    before = _snapshot(zk_client)
    first = submit(client, path, "wc", request_id="req-submit-ghost")
    ghost = zk_client.exists(PATHS.request("req-submit-ghost"))
    assert ghost is not None
    retry = submit(client, path, "wc", request_id="req-submit-ghost")
    assert retry.topology_id == first.topology_id

    undone = _undo(zk_client, ghost.czxid, before)
    assert f"deleted {PATHS.request('req-submit-ghost')}" in undone

    assert zk_client.get_children(PATHS.storms) == [first.topology_id], (
        f"the acknowledged submit was undone: {undone}"
    )
    assert zk_client.get(PATHS.name("wc"))[0].decode() == first.topology_id
    again = submit(client, path, "wc", request_id="req-submit-ghost")
    assert (again.topology_id, again.epoch) == (first.topology_id, first.epoch)
    assert zk_client.get_children(PATHS.storms) == [first.topology_id]
