"""A retried change is answered from its request record only when the quorum has it.

The leader reads ``/requests/<id>`` from its own ZooKeeper server. A server can show a
record the quorum lacks: here a follower cut from its peers keeps serving reads of its
old tree until syncLimit passes, while the quorum deletes the record. (The chaos soak's
ZooKeeper-leader partial partition lost an acknowledged kill this way: the retry was
answered from a record only one server showed.) What a user must see: every
acknowledged kill is in the quorum's state."""

from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.recipe.lock import Lock

from cluster.api import pb, records
from cluster.paths import Paths
from devtools.netns import LoopbackPortCut
from devtools.zkserver import ZooKeeperCluster
from fencing import Create, FencedWriter, LeadershipToken, NotLeaderError, WriteOutcomeUnknown
from fencing.office import take_office
from nimbus.duties.lifecycle import Lifecycle
from nimbus.duties.requests import remember
from tests.waiting import wait_until


def _client(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=20.0)
    client.start(timeout=30)
    return client


@pytest.mark.timeout(300)
def test_a_record_only_a_stale_server_shows_is_no_acknowledgement(
    port_cut: type[LoopbackPortCut], healthy_ensemble: ZooKeeperCluster
) -> None:
    ens = healthy_ensemble
    zk_leader = ens.leader_index()
    assert zk_leader is not None
    stale = next(i for i in range(ens.size) if i != zk_leader)
    paths = Paths(f"/recall-{uuid.uuid4().hex[:8]}")
    client = _client(ens.node_connect_string(stale))  # the Nimbus leader, on that server
    admin = _client(ens.node_connect_string(zk_leader))
    pid = ens.pid(stale)
    assert pid is not None
    peers = [p for j in range(ens.size) if j != stale for p in ens.quorum_ports(j)]
    cut = port_cut(ens.quorum_ports(stale), owner=pid, peer_ports=peers)
    try:
        for folder in (paths.leader_lock, paths.epochs, paths.storms, paths.names, paths.requests):
            client.ensure_path(folder)
        lock = Lock(client, paths.leader_lock, identifier="me:1")
        assert lock.acquire(timeout=10)
        node = f"{lock.path}/{lock.node}"
        epoch = take_office(
            client, paths, lock_node=node, holder="me:1", now_ms=lambda: 0, timeout=5
        )
        writer = FencedWriter(client, LeadershipToken(node, epoch), timeout=5)
        lifecycle = Lifecycle(client, paths, current_writer=lambda: writer)
        tid, rid = "wc-1-1", uuid.uuid4().hex
        base = records.StormBase(name="wc", status=records.ACTIVE)
        writer.batch(
            [
                Create(paths.storm(tid), base.SerializeToString()),
                Create(paths.name("wc"), tid.encode()),
                *remember(paths, rid, method="KillTopology", topology_id=tid, epoch=epoch),
            ]
        )  # what the stale server will keep showing

        cut.cut()
        admin.delete(paths.request(rid))  # the quorum, without the cut server, drops it
        request = pb.KillTopologyRequest(name="wc", wait_s=30, client_request_id=rid)
        acknowledged = _kill_or_none(lifecycle, request)  # None: the client retries
        assert acknowledged is None, (
            f"acknowledged from a record the quorum lacks: {acknowledged}; "
            f"quorum has it: {admin.exists(paths.request(rid)) is not None}"
        )

        cut.heal()
        ens.heal()
        wait_until(lambda: client.state == KazooState.CONNECTED, timeout=60,
                   message="the leader's session back on its server")  # fmt: skip
        retried = wait_until(lambda: _kill_or_none(lifecycle, request), timeout=60,
                             message="the retried kill answered")  # fmt: skip
        assert retried is not None and retried.status == records.KILLED and retried.epoch == epoch
        admin.sync(paths.root)
        stored = records.StormBase.FromString(admin.get(paths.storm(tid))[0])
        assert stored.status == records.KILLED, "the acknowledged kill is in the quorum's state"
        assert admin.exists(paths.request(rid)) is not None
    finally:
        cut.heal()
        for c in (client, admin):
            c.stop()
            c.close()


def _kill_or_none(
    lifecycle: Lifecycle, request: pb.KillTopologyRequest
) -> pb.TopologyActionResponse | None:
    try:
        return lifecycle.kill(request)
    except (WriteOutcomeUnknown, NotLeaderError, KazooException):
        return None
