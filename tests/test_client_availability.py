"""Availability as a client sees it: the ``nimbus`` CLI with default settings rides
through a failover, and no call ever ends in ``UNKNOWN``.

The faults are real: SIGKILL and SIGSTOP of the leader process, and the leader's ZooKeeper
link cut mid-call by the fault proxy. Each CLI call runs as a user runs it: its own
process, every replica as a seed, no flags beyond the required ones.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from cluster.api import pb, records, rpc
from cluster.factory import make_grpc_server
from devtools.faultproxy import FaultProxy
from fencing import WriteOutcomeUnknown
from nimbus.client import NimbusClient
from nimbus.server.grpc_errors import ErrorInterceptor
from nimbus.server.grpc_metrics import MetricsInterceptor
from tests.cluster import REPO, Replica, wait_for_agreed_leader
from tests.processes import nimbus_cli
from tests.replica_fixtures import ROOT, Spawn, package, sync_flags
from tests.waiting import wait_until

# -- the server: every escaped exception gets a status ---------------------------------------


class _Broken(rpc.NimbusServicer):
    """Handlers that fail the ways a replica's can: a bug, ZooKeeper lost mid-write."""

    def ListTopologies(
        self, request: pb.ListTopologiesRequest, context: grpc.ServicerContext
    ) -> pb.ListTopologiesResponse:
        raise RuntimeError("boom\nsecond line of a long story")

    def KillTopology(
        self, request: pb.KillTopologyRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        raise WriteOutcomeUnknown("connection lost before the reply")

    def DeactivateTopology(
        self, request: pb.TopologyNameRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        raise ConnectionLoss()

    def DownloadCode(
        self, request: pb.DownloadCodeRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.CodeChunk]:
        yield pb.CodeChunk(data=b"x")
        raise KeyError("mid-stream")

    def GetTopology(
        self, request: pb.GetTopologyRequest, context: grpc.ServicerContext
    ) -> pb.TopologyDetail:
        context.abort(grpc.StatusCode.NOT_FOUND, "no topology named 'x'")
        raise AssertionError("unreachable")


@pytest.fixture
def broken_server() -> Iterator[tuple[rpc.NimbusStub, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    server, port = make_grpc_server(
        "127.0.0.1:0",
        interceptors=[
            MetricsInterceptor(lambda method, code, _s: seen.append((method, code))),
            ErrorInterceptor(),
        ],
    )
    rpc.add_NimbusServicer_to_server(_Broken(), server)  # type: ignore[abstract]
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield rpc.NimbusStub(channel), seen
    finally:
        channel.close()
        server.stop(0)


def test_an_unexpected_error_is_internal_with_one_readable_line(
    broken_server: tuple[rpc.NimbusStub, list[tuple[str, str]]],
) -> None:
    stub, seen = broken_server
    with pytest.raises(grpc.RpcError) as failed:
        stub.ListTopologies(pb.ListTopologiesRequest(), timeout=5)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    details = failed.value.details() or ""
    assert "ListTopologies" in details and "RuntimeError: boom" in details
    assert "second line" not in details
    with pytest.raises(grpc.RpcError) as mid_stream:
        list(stub.DownloadCode(pb.DownloadCodeRequest(digest="d"), timeout=5))
    assert mid_stream.value.code() == grpc.StatusCode.INTERNAL
    # What the handler chose itself is kept; the metrics see the mapped codes.
    with pytest.raises(grpc.RpcError) as chosen:
        stub.GetTopology(pb.GetTopologyRequest(name="x"), timeout=5)
    assert chosen.value.code() == grpc.StatusCode.NOT_FOUND
    codes = {code for _, code in seen}
    assert "UNKNOWN" not in codes and {"INTERNAL", "NOT_FOUND"} <= codes


def test_zookeeper_lost_mid_call_is_unavailable_and_says_to_retry_with_the_request_id(
    broken_server: tuple[rpc.NimbusStub, list[tuple[str, str]]],
) -> None:
    stub, _ = broken_server
    calls: list[Callable[[], object]] = [
        lambda: stub.KillTopology(pb.KillTopologyRequest(name="wc"), timeout=5),
        lambda: stub.DeactivateTopology(pb.TopologyNameRequest(name="wc"), timeout=5),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as lost:
            call()
        assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "same request id" in (lost.value.details() or "")


# -- the CLI with default settings through real faults -------------------------------------


def seeds_of(replicas: list[Replica]) -> str:
    return ",".join(r.address for r in replicas)


#: The session timeout T of these replicas: the issue's figures were seen at 4 s, where a
#: failover outlasts the retry budgets a count of attempts gives.
T = 4.0


@pytest.fixture
def three(spawn: Spawn) -> list[Replica]:
    replicas = [spawn(extra=sync_flags(), session_timeout=T) for _ in range(3)]
    wait_for_agreed_leader(replicas, timeout=40)
    return replicas


def leader_of(replicas: list[Replica]) -> Replica:
    leader = wait_for_agreed_leader(replicas, timeout=40)
    return next(r for r in replicas if r.address == leader.replica_id)


def submit_cli(path: Path, name: str, seeds: str) -> subprocess.CompletedProcess[str]:
    return nimbus_cli("submit", str(path), "--name", name, "--seeds", seeds)


def with_topology(replicas: list[Replica], tmp_path: Path, name: str) -> tuple[str, Replica]:
    """Topology ``name`` submitted through the CLI (which must succeed); the seeds and the
    leader."""
    seeds = seeds_of(replicas)
    path, _ = package(tmp_path, name)
    assert submit_cli(path, name, seeds).returncode == 0
    return seeds, leader_of(replicas)


def test_cli_calls_right_after_a_sigkill_of_the_leader_succeed(
    three: list[Replica], tmp_path: Path
) -> None:
    seeds, leader = with_topology(three, tmp_path, "a")
    leader.send(signal.SIGKILL)
    # At once, while no leader is in office: the calls must wait for the next one.
    killed = nimbus_cli("kill", "a", "--seeds", seeds, "--json")
    assert killed.returncode == 0, killed.stderr
    assert json.loads(killed.stdout)["status"] == "KILLED"
    other, _ = package(tmp_path, "b")
    submitted = submit_cli(other, "b", seeds)
    assert submitted.returncode == 0, submitted.stderr


def test_a_submit_while_the_leader_is_frozen_succeeds(three: list[Replica], tmp_path: Path) -> None:
    seeds = seeds_of(three)
    leader = leader_of(three)
    path, _ = package(tmp_path, "frozen")
    with leader.paused():
        submitted = submit_cli(path, "frozen", seeds)
    assert submitted.returncode == 0, submitted.stderr
    listed = nimbus_cli("list", "--seeds", seeds, "--json")
    assert listed.returncode == 0, listed.stderr
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert names.count("frozen") == 1


def test_a_kill_whose_leader_loses_zookeeper_mid_call_lands_exactly_once(
    spawn: Spawn, zk_hosts: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    """The leader's ZooKeeper replies are dropped while a kill is in flight: the replica
    answers UNAVAILABLE (not UNKNOWN), the CLI retries with the same request id, and the
    kill is recorded once."""
    first_zk = zk_hosts.split(",")[0].split("/")[0]
    chroot = zk_hosts[len(zk_hosts.split("/")[0]) :] if "/" in zk_hosts else ""
    host, port = first_zk.rsplit(":", 1)
    with FaultProxy(host, int(port)) as proxy:
        cut = spawn(extra=sync_flags(), zookeeper=f"{proxy.address}{chroot}")
        wait_for_agreed_leader([cut], timeout=40)
        others = [spawn(extra=sync_flags()) for _ in range(2)]
        replicas = [cut, *others]
        seeds = seeds_of(replicas)
        wait_for_agreed_leader(replicas, timeout=40)
        path, _ = package(tmp_path, "once")
        assert submit_cli(path, "once", seeds).returncode == 0
        assert leader_of(replicas) is cut
        proxy.blackhole("downstream")  # requests reach ZooKeeper; no reply comes back
        call = subprocess.Popen(
            [sys.executable, "-m", "nimbus.cli", "kill", "once", "--seeds", seeds, "--json"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(
                lambda: cut.health() != "SERVING", timeout=30, message="the cut leader to notice"
            )
        finally:
            proxy.pass_through()
        out, err = call.communicate(timeout=90)
    assert call.returncode == 0, err
    assert json.loads(out)["status"] == "KILLED"
    assert "UNKNOWN" not in err
    requests = zk_client.get_children(f"{ROOT}/requests")
    kills: list[Any] = []
    for name in requests:
        record = records.RequestOutcome.FromString(zk_client.get(f"{ROOT}/requests/{name}")[0])
        if record.method == "KillTopology":
            kills.append(record)
    assert len(kills) == 1


def test_the_cli_names_what_it_tried_when_no_replica_answers(tmp_path: Path) -> None:
    dead = [f"127.0.0.1:{p}" for p in (1, 9)]  # nothing listens there
    done = nimbus_cli("list", "--seeds", ",".join(dead), "--timeout", "2")
    assert done.returncode == 1
    assert "no leader answered within 2s" in done.stderr
    assert "127.0.0.1:1" in done.stderr and "raise --timeout" in done.stderr


@pytest.mark.parametrize(
    "verb",
    [
        ("kill", "wc", "--wait", "0"),
        ("deactivate", "wc"),
        ("rebalance", "wc", "--workers", "2", "--wait", "0"),
    ],
)
def test_every_verb_gives_up_at_its_timeout(verb: tuple[str, ...]) -> None:
    """``--timeout 2`` bounds a change's call too (it used to wait at least 10 s)."""
    dead = "127.0.0.1:1,127.0.0.1:9"  # nothing listens there
    done = nimbus_cli(*verb, "--seeds", dead, "--timeout", "2", timeout=8)
    assert done.returncode == 1
    assert "within 2s" in done.stderr, done.stderr


def test_a_follower_forwards_a_leader_only_call_when_asked_and_never_twice(
    three: list[Replica], tmp_path: Path
) -> None:
    """What lets a client cut from the leader alone still get through: a follower relays."""
    _, leader = with_topology(three, tmp_path, "relay")
    follower = next(r for r in three if r is not leader)
    request = pb.TopologyNameRequest(name="relay", client_request_id="relay-1")
    with pytest.raises(grpc.RpcError) as redirected:
        follower.stub().DeactivateTopology(request, timeout=10)
    assert redirected.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    looped = (("nimbus-forward", "1"), ("nimbus-forwarded-by", "elsewhere:1"))
    with pytest.raises(grpc.RpcError) as not_again:
        follower.stub().DeactivateTopology(request, timeout=10, metadata=looped)
    assert not_again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    reply = follower.stub().DeactivateTopology(
        request, timeout=10, metadata=(("nimbus-forward", "1"),)
    )
    assert reply.status == records.INACTIVE
    again = follower.stub().DeactivateTopology(
        request, timeout=10, metadata=(("nimbus-forward", "1"),)
    )
    assert again.epoch == reply.epoch, "the same request id: the first outcome"


# -- the client: a stuck leader is given up once a newer term answers -----------------------


class _Replica(rpc.NimbusServicer):
    """A replica as the client sees it: who it says leads, and what a kill does on it."""

    def __init__(self, address: str, epoch: int, *, stuck: bool) -> None:
        self.address, self.epoch, self.stuck = address, epoch, stuck
        self.leading = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.kills: list[str] = []

    def GetLeaderAddress(
        self, request: pb.GetLeaderAddressRequest, context: grpc.ServicerContext
    ) -> pb.GetLeaderAddressResponse:
        return pb.GetLeaderAddressResponse(
            replica_id=self.address if self.leading.is_set() else "",
            epoch=self.epoch if self.leading.is_set() else 0,
            responder=self.address,
            responder_is_leader=self.leading.is_set(),
        )

    def KillTopology(
        self, request: pb.KillTopologyRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        self.kills.append(request.client_request_id)
        self.entered.set()
        if self.stuck:  # a leader stuck mid-call (on ZooKeeper, say): still answers pings
            self.release.wait(120)
        return pb.TopologyActionResponse(name=request.name, status=records.KILLED, epoch=self.epoch)


def test_a_call_stuck_on_a_deposed_leader_moves_to_the_newer_term() -> None:
    """The leader of epoch 1 takes the kill and never answers (its process alive, so no
    keepalive ends the call); meanwhile another replica takes office with epoch 2. The
    call must be re-sent there with the same request id well within its deadline."""
    servers = []
    replicas: list[_Replica] = []
    for epoch, stuck in ((1, True), (2, False)):
        server, port = make_grpc_server("127.0.0.1:0", interceptors=[ErrorInterceptor()])
        replica = _Replica(f"127.0.0.1:{port}", epoch, stuck=stuck)  # type: ignore[abstract]
        rpc.add_NimbusServicer_to_server(replica, server)
        server.start()
        servers.append(server)
        replicas.append(replica)
    old, new = replicas
    old.leading.set()

    # The new term begins once the old leader is stuck in the call.
    def new_term() -> None:
        if old.entered.wait(30):
            new.leading.set()

    threading.Thread(target=new_term, daemon=True).start()
    client = NimbusClient([old.address, new.address], deadline=20)
    try:
        reply = client.kill(pb.KillTopologyRequest(name="t", client_request_id="rid-1"))
        assert reply.epoch == 2 and reply.status == records.KILLED
        assert old.kills == ["rid-1"] and new.kills == ["rid-1"], "re-sent with its request id"
        assert client.max_epoch_seen == 2
    finally:
        client.close()
        old.release.set()
        for server in servers:
            server.stop(0)


def test_a_read_outlasts_a_leader_gap_longer_than_ten_seconds(spawn: Spawn) -> None:
    """A leader killed while ZooKeeper's disk is slow is replaced after 12-14 s; `nimbus
    list` sent just before must ride that out (it gave up at 10 s: failed calls in
    bench/chaos_cli.py's zk-slow-disk@0.9+sigkill row). The only replica is paused for
    12 s; the read sent meanwhile is answered once it runs again."""
    replica = spawn(session_timeout=30.0)
    wait_for_agreed_leader([replica], timeout=60)
    assert replica.proc is not None
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        answered: list[subprocess.CompletedProcess[str]] = []
        reader = threading.Thread(
            target=lambda: answered.append(
                nimbus_cli("list", "--json", "--seeds", replica.address, timeout=60)
            )
        )
        reader.start()
        reader.join(12.0)  # holding the fault is the fault
        assert not answered, "the read ended while the only replica was paused"
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    reader.join(50)
    assert answered and answered[0].returncode == 0, answered
    assert json.loads(answered[0].stdout) == []
