"""Leadership with replicas as real processes on a real ZooKeeper."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from cluster.api import pb, records
from cluster.paths import Paths
from devtools.faultproxy import FaultProxy
from leader.discovery import LeaderCache
from leader.elector import Elector
from leader.settings import ElectorCallbacks, ElectorSettings
from nimbus.call_metadata import LEADER_METADATA_KEY
from nimbus.client import NimbusCallError, NimbusClient
from tests.cluster import Replica, wait_for_agreed_leader
from tests.processes import nimbus_cli
from tests.waiting import wait_until

ROOT = "/storm"


def _by_address(replicas: list[Replica], address: str) -> Replica:
    return next(r for r in replicas if r.address == address)


def test_three_replicas_agree_on_exactly_one_leader(spawn: object, zk_client: KazooClient) -> None:
    replicas = [spawn() for _ in range(3)]  # type: ignore[operator]
    leader = wait_for_agreed_leader(replicas, timeout=30)
    assert leader.epoch >= 1
    assert leader.replica_id in {r.address for r in replicas}
    leaders = [r for r in replicas if r.health("nimbus.leader") == "SERVING"]
    assert [r.address for r in leaders] == [leader.replica_id]
    assert all(r.health("") == "SERVING" for r in replicas)
    with NimbusClient([r.address for r in replicas]) as client:
        wait_until(lambda: len(client.nimbuses().nimbuses) == 3, timeout=10)
        listing = client.nimbuses()
    flags = {n.address: n.is_leader for n in listing.nimbuses}
    assert flags == {r.address: r.address == leader.replica_id for r in replicas}
    assert listing.leader_epoch == leader.epoch


def test_graceful_stop_hands_over_without_waiting_for_the_session(spawn: object) -> None:
    # A 30 s session: a hand-over that waited for expiry would miss the 10 s deadline.
    replicas = [spawn(session_timeout=30.0) for _ in range(2)]  # type: ignore[operator]
    first = wait_for_agreed_leader(replicas, timeout=30)
    old = _by_address(replicas, first.replica_id)
    assert old.stop(signal.SIGTERM) == 0, old.log_tail()
    rest = [r for r in replicas if r is not old]
    second = wait_for_agreed_leader(rest, timeout=10, newer_than=first.epoch)
    assert second.replica_id != first.replica_id


def test_a_killed_leader_is_replaced_after_its_session_times_out(spawn: object) -> None:
    replicas = [spawn() for _ in range(3)]  # type: ignore[operator]
    first = wait_for_agreed_leader(replicas, timeout=30)
    old = _by_address(replicas, first.replica_id)
    old.stop(signal.SIGKILL)
    rest = [r for r in replicas if r is not old]
    second = wait_for_agreed_leader(rest, timeout=30, newer_than=first.epoch)
    assert second.replica_id != first.replica_id


def test_a_paused_leader_wakes_as_a_follower_and_queues_again(
    spawn: object, zk_client: KazooClient
) -> None:
    replicas = [spawn() for _ in range(2)]  # type: ignore[operator]
    first = wait_for_agreed_leader(replicas, timeout=30)
    old = _by_address(replicas, first.replica_id)
    other = next(r for r in replicas if r is not old)
    registered = Paths(ROOT).nimbus(old.address)
    wait_until(lambda: zk_client.exists(registered), timeout=10)
    old.send(signal.SIGSTOP)
    second = wait_for_agreed_leader([other], timeout=30, newer_than=first.epoch)
    assert second.replica_id == other.address
    old.send(signal.SIGCONT)
    # Its very first answers after waking must not claim leadership.
    reply = old.leader_reply()
    assert reply is None or (not reply.responder_is_leader and reply.replica_id != old.address)
    assert old.health("nimbus.leader") == "NOT_SERVING"
    lock_path = Paths(ROOT).leader_lock

    def queued_again() -> bool:
        owners = [zk_client.get(f"{lock_path}/{c}")[0] for c in zk_client.get_children(lock_path)]
        return old.address.encode() in owners

    wait_until(queued_again, timeout=30)
    # Its registry node is there: on its old session when it woke before that expired (the
    # silence preemption took its lock node, not its session), else on a new one.
    wait_until(lambda: zk_client.exists(registered), timeout=30)
    assert wait_for_agreed_leader(replicas, timeout=30).replica_id == other.address


def test_cut_from_zookeeper_stops_leading_before_expiry_and_resumes_same_epoch(
    spawn: object, zk_server: object, zk_hosts: str, zk_client: KazooClient
) -> None:
    host, port = zk_server.connect_string.split(",")[0].split(":")  # type: ignore[attr-defined]
    chroot = zk_hosts[zk_hosts.index("/") :]
    proxy = FaultProxy(host, int(port))
    proxy.start()
    try:
        # 12 s session: the lease ends at 8 s, ZooKeeper would expire the session at 12 s,
        # which leaves the test 4 s to see NOT_SERVING and heal the link, even when loaded.
        replica = spawn(zookeeper=f"{proxy.address}{chroot}", session_timeout=12.0)  # type: ignore[operator]
        first = wait_for_agreed_leader([replica], timeout=30)
        lock_node = records.LeaderEpoch.FromString(
            zk_client.get(Paths(ROOT).leader_epoch)[0]
        ).lock_node
        proxy.blackhole()
        wait_until(lambda: replica.health("nimbus.leader") == "NOT_SERVING", timeout=15)
        # It stopped leading while its session (and lock node) still lived.
        assert zk_client.exists(lock_node) is not None
        proxy.pass_through()
        proxy.reset()  # drop the stale connection so kazoo reconnects at once
        again = wait_for_agreed_leader([replica], timeout=20)
        assert (again.replica_id, again.epoch) == (first.replica_id, first.epoch)
        assert replica.health("nimbus.leader") == "SERVING"
    finally:
        proxy.stop()


def test_followers_redirect_leader_only_calls_and_the_client_follows(spawn: object) -> None:
    replicas = [spawn() for _ in range(2)]  # type: ignore[operator]
    leader = wait_for_agreed_leader(replicas, timeout=30)
    follower = next(r for r in replicas if r.address != leader.replica_id)
    with pytest.raises(grpc.RpcError) as raw:
        follower.stub().KillTopology(pb.KillTopologyRequest(name="wc"), timeout=5)
    assert raw.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    trailing: dict[str, object] = {m.key: m.value for m in raw.value.trailing_metadata()}
    assert trailing[LEADER_METADATA_KEY] == leader.replica_id
    with NimbusClient([follower.address]) as client:
        # Reaching the leader shows as its answer: no topology of that name.
        with pytest.raises(NimbusCallError) as followed:
            client.call_leader("KillTopology", pb.KillTopologyRequest(name="wc"))
        assert followed.value.code == grpc.StatusCode.NOT_FOUND
        assert client.max_epoch_seen == leader.epoch


def test_the_client_rides_through_a_failover_and_never_goes_back_in_epoch(spawn: object) -> None:
    replicas = [spawn() for _ in range(3)]  # type: ignore[operator]
    first = wait_for_agreed_leader(replicas, timeout=30)
    with NimbusClient([r.address for r in replicas], deadline=40, attempts=200) as client:
        assert client.leader().epoch == first.epoch
        _by_address(replicas, first.replica_id).stop(signal.SIGKILL)
        seen = client.leader()
        while seen.replica_id == first.replica_id:  # a replica may still remember it briefly
            seen = client.leader()
        assert seen.epoch > first.epoch
        assert client.max_epoch_seen == seen.epoch


# -- the code gate, in-process with a gate we control ------------------------------------


def test_a_replica_lacking_code_never_takes_office_even_first_in_the_queue(
    zk_client: KazooClient,
) -> None:
    for folder in Paths(ROOT).folders():
        zk_client.ensure_path(folder)
    has_code = threading.Event()
    calls: list[str] = []

    def gate() -> bool:
        calls.append("ask")
        return len(calls) == 1 or has_code.is_set()  # passes before queueing, then fails

    cache = LeaderCache(zk_client, Paths(ROOT))
    cache.start()
    named: list[str] = []

    def on_change() -> None:
        leader = cache.leader()
        if leader is not None:
            named.append(leader.address)

    cache.add_listener(on_change)
    elector = Elector(
        zk_client,
        ElectorSettings(
            paths=Paths(ROOT), replica_id="lacking:1", session_timeout=2.0, gate_poll_interval=0.05
        ),
        ElectorCallbacks(has_all_code=gate),
    )
    elector.start()
    try:
        assert elector.wait_for(lambda h: "waiting for code (after winning)" in h, timeout=10)
        wait_until(lambda: len(calls) >= 5, timeout=10)  # still asking, still not leading
        assert not elector.is_leader()
        assert zk_client.exists(Paths(ROOT).leader_epoch) is None, "took office without code"
        assert cache.leader() is None and named == []
        has_code.set()
        elector.code_changed()
        assert elector.wait_for(lambda h: any(s.startswith("took office") for s in h), timeout=10)
        assert cache.wait_for(lambda c: c.leader() is not None, timeout=10)
        leader = cache.leader()
        assert leader is not None and (leader.address, leader.epoch) == ("lacking:1", 1)
    finally:
        elector.stop()


def test_a_lock_node_our_session_left_queued_is_dropped_not_waited_on(
    zk_client: KazooClient,
) -> None:
    """A release that failed on a dropped connection leaves our node in the queue while
    the session lives; the next contender of the same session must not wait behind it
    (nor must every other replica, behind both)."""
    paths = Paths(ROOT)
    for folder in paths.folders():
        zk_client.ensure_path(folder)
    leftover = zk_client.create(
        f"{paths.leader_lock}/0123456789abcdef__lock__", b"me:1", ephemeral=True, sequence=True
    )
    elector = Elector(
        zk_client,
        ElectorSettings(paths=Paths(ROOT), replica_id="me:1", session_timeout=2.0),
        ElectorCallbacks(has_all_code=lambda: True),
    )
    elector.start()
    try:
        assert elector.wait_for(lambda h: any(s.startswith("took office") for s in h), timeout=10)
        assert zk_client.exists(leftover) is None
        assert any("dropped our own leftover lock node" in s for s in elector.history)
        assert elector.is_leader()
    finally:
        elector.stop()


def test_the_client_ignores_a_lagging_replicas_older_epoch() -> None:
    from concurrent import futures

    from cluster.api import rpc

    class Fixed(rpc.NimbusServicer):
        def __init__(self, epoch: int) -> None:
            self.epoch = epoch

        def GetLeaderAddress(self, request: object, context: object) -> pb.GetLeaderAddressResponse:
            return pb.GetLeaderAddressResponse(
                host="10.0.0.1", port=1, replica_id=f"10.0.0.1:{self.epoch}", epoch=self.epoch
            )

    servers = []
    addresses = []
    for epoch in (5, 3):
        server = grpc.server(futures.ThreadPoolExecutor(2))
        rpc.add_NimbusServicer_to_server(Fixed(epoch), server)  # type: ignore[abstract]
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        addresses.append(f"127.0.0.1:{port}")
    try:
        with NimbusClient(addresses, attempts=2, deadline=5) as client:
            assert client.leader().epoch == 5
            servers[0].stop(None).wait()
            with pytest.raises(Exception, match="no leader"):
                client.leader()  # only the epoch-3 replica answers: ignored
            assert client.max_epoch_seen == 5
    finally:
        for server in servers:
            server.stop(None)


def test_only_a_replica_holding_every_topologys_code_leads(
    spawn: object, zk_client: KazooClient, tmp_path: Path
) -> None:
    import hashlib

    from code_sync.package import make_package

    paths = Paths(ROOT)
    for folder in paths.folders():
        zk_client.ensure_path(folder)
    holder_dir = tmp_path / "holder"
    holder_dir.mkdir()
    staged = make_package({"topology.py": b"def build(): ...\n"}, tmp_path / "wc.zip")
    digest = hashlib.sha256(staged.read_bytes()).hexdigest()
    staged.rename(holder_dir / digest)
    zk_client.create(
        paths.storm("wc-1-1"), records.StormBase(name="wc", digest=digest).SerializeToString()
    )
    lacking = spawn(code_dir=tmp_path / "lacking")  # type: ignore[operator]
    wait_until(lambda: "waiting for code" in lacking.log_tail(100), timeout=20)
    assert lacking.leader_reply() is None, "a replica without the code took office"
    assert zk_client.exists(paths.leader_epoch) is None
    holder = spawn(code_dir=holder_dir)  # type: ignore[operator]
    leader = wait_for_agreed_leader([lacking, holder], timeout=30)
    # Whoever leads holds the code: the lacking one only after fetching it from the holder.
    assert (tmp_path / "lacking" / digest).is_file() or leader.replica_id == holder.address
    wait_until(lambda: (tmp_path / "lacking" / digest).is_file(), timeout=20)


def test_the_cli_prints_the_leader_and_the_replicas_as_json(spawn: object) -> None:
    import json

    replicas = [spawn() for _ in range(2)]  # type: ignore[operator]
    leader = wait_for_agreed_leader(replicas, timeout=30)
    seeds = ",".join(r.address for r in replicas)

    shown = nimbus_cli("leader", "--seeds", seeds, "--json")
    assert shown.returncode == 0, shown.stderr
    printed = json.loads(shown.stdout)
    assert (printed["address"], printed["epoch"]) == (leader.replica_id, leader.epoch)
    wait_until(
        lambda: len(json.loads(nimbus_cli("nimbuses", "--seeds", seeds, "--json").stdout)) == 2
    )
    listed = json.loads(nimbus_cli("nimbuses", "--seeds", seeds, "--json").stdout)
    assert {(n["address"], n["is_leader"]) for n in listed} == {
        (r.address, r.address == leader.replica_id) for r in replicas
    }
    assert all(n["epoch"] == leader.epoch for n in listed if n["is_leader"])
    for r in replicas:
        r.stop(signal.SIGKILL)
    missing = nimbus_cli("leader", "--seeds", seeds, "--json", "--timeout", "2")
    assert missing.returncode != 0
    assert len(missing.stderr.strip().splitlines()) == 1
    assert "no leader" in missing.stderr
