"""Topology lifecycle through the CLI and the client, on replicas as processes."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient

from cluster.api import pb, records, rpc
from cluster.paths import Paths
from devtools.zkserver import free_ports
from nimbus.client import NimbusCallError, NimbusClient
from tests.cluster import REPO, wait_for_agreed_leader
from tests.processes import nimbus_cli
from tests.replica_fixtures import Spawn, lone_leader, package, submit
from tests.supervisors import Command
from tests.waiting import wait_until

PATHS = Paths("/storm")


def ok_json(*args: str) -> Any:
    done = nimbus_cli(*args, "--json")
    assert done.returncode == 0, f"{args}: {done.stderr}"
    return json.loads(done.stdout)


def test_the_whole_lifecycle_through_the_cli_on_a_dev_cluster_is_seen_by_every_replica(
    dev_command: Command, tmp_path: Path
) -> None:
    base = free_ports(1)[0]
    dev = subprocess.Popen(
        [
            *dev_command, "--replicas", "3", "--supervisors", "1",
            "--base-port", str(base), "--workdir", str(tmp_path / "dev"),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        addresses = [f"127.0.0.1:{base + i}" for i in (1, 2, 3)]
        seeds = ",".join(addresses)
        wait_until(lambda: nimbus_cli("leader", "--seeds", seeds, "--timeout", "2").returncode == 0,
                   timeout=60)  # fmt: skip
        path, _ = package(tmp_path, "wc")
        done = nimbus_cli("submit", str(path), "--name", "wc", "--seeds", seeds)
        assert done.returncode == 0, done.stderr
        listed = ok_json("list", "--seeds", seeds)
        assert [(t["name"], t["status"]) for t in listed] == [("wc", "ACTIVE")]
        for address in addresses:  # GetClusterSummary: the same picture from every replica
            view = ok_json("cluster", "--seeds", address)
            assert isinstance(view, dict)
            assert sorted(n["address"] for n in view["nimbuses"]) == addresses
            assert [n["is_leader"] for n in view["nimbuses"]].count(True) == 1
            assert len(view["supervisors"]) == 1 and view["supervisors"][0]["slots_total"] > 0
            assert [(t["name"], t["status"]) for t in view["topologies"]] == [("wc", "ACTIVE")]
            assert view["leader_epoch"] >= 1

        channels = [grpc.insecure_channel(a) for a in addresses]
        stubs = [rpc.NimbusStub(c) for c in channels]

        def everywhere() -> set[str]:
            """The status each replica itself reports (in process: three CLI runs take
            seconds on a loaded box, longer than a short rebalance wait)."""
            request = pb.GetTopologyRequest(name="wc")
            return {
                records.TopologyStatus.Name(s.GetTopology(request, timeout=10).summary.status)
                for s in stubs
            }

        for action, expected in (
            (("deactivate", "wc"), "INACTIVE"),
            (("activate", "wc"), "ACTIVE"),
            (("rebalance", "wc", "--workers", "3", "--wait", "10"), "REBALANCING"),
        ):
            reply = ok_json(*action, "--seeds", seeds)
            assert reply["status"] == expected
            assert everywhere() == {expected}
        wait_until(lambda: everywhere() == {"ACTIVE"}, timeout=30)
        more = nimbus_cli("rebalance", "wc", "--workers", "3", "--seeds", seeds)
        assert more.returncode == 0, more.stderr
        assert "its other 2 worker slot(s) stay idle" in more.stderr, "extra workers are explained"
        wait_until(lambda: everywhere() == {"ACTIVE"}, timeout=30)
        unknown = nimbus_cli("rebalance", "wc", "--parallelism", "nosuch=3", "--seeds", seeds)
        assert unknown.returncode == 1 and "INVALID_ARGUMENT" in unknown.stderr
        assert "no component 'nosuch'" in unknown.stderr
        shown = ok_json("describe", "wc", "--seeds", seeds)
        assert shown["num_workers"] == 3
        plain = nimbus_cli("describe", "wc", "--seeds", seeds).stdout
        assert "component_parallelism: {" in plain and "{'" not in plain, "JSON, not reprs"
        wait_until(
            lambda: len(ok_json("describe", "wc", "--seeds", seeds)["workers"]) == 3,
            timeout=30,
        )
        killed = ok_json("kill", "wc", "--wait", "1", "--seeds", seeds)
        assert killed["status"] == "KILLED"
        wait_until(lambda: ok_json("list", "--seeds", seeds) == [], timeout=20)
        gone = nimbus_cli("describe", "wc", "--seeds", seeds)
        assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr
        again = nimbus_cli("submit", str(path), "--name", "wc", "--seeds", seeds)
        assert again.returncode == 0, "the name is free again after removal: " + again.stderr
        for channel in channels:
            channel.close()
    finally:
        dev.send_signal(signal.SIGTERM)
        output, _ = dev.communicate(timeout=60)
    assert dev.returncode == 0, output


def test_killing_the_leader_between_calls_loses_no_acknowledged_change(
    spawn: Spawn, tmp_path: Path
) -> None:
    replicas = [spawn() for _ in range(3)]
    seeds = [r.address for r in replicas]
    path, _ = package(tmp_path, "wc")
    calls = [
        ("DeactivateTopology", pb.TopologyNameRequest(name="wc"), records.INACTIVE),
        ("ActivateTopology", pb.TopologyNameRequest(name="wc"), records.ACTIVE),
        ("DeactivateTopology", pb.TopologyNameRequest(name="wc"), records.INACTIVE),
    ]
    wait_for_agreed_leader(replicas, timeout=30)
    with NimbusClient(seeds) as client:
        submit(client, path, "wc")
    for method, request, expected in calls:
        leader = wait_for_agreed_leader(replicas, timeout=30)
        victim = next(r for r in replicas if r.address == leader.replica_id)
        # The client last saw the old leader: its next call must find the new one.
        seeds = [victim.address] + [r.address for r in replicas if r is not victim]
        with NimbusClient(seeds, deadline=60, attempts=200) as client:
            client.leader()
            victim.stop(signal.SIGKILL)
            replicas.remove(victim)
            reply = client.call_leader(method, request)
            assert reply.status == expected
            assert client.describe("wc").summary.status == expected
        replicas.append(spawn(code_dir=victim.code_dir))


def test_a_retried_request_id_returns_the_first_outcome(
    lone_client: tuple[NimbusClient, Path], zk_client: KazooClient
) -> None:
    client, path = lone_client
    first = submit(client, path, "wc", request_id="req-submit-1")
    second = submit(client, path, "wc", request_id="req-submit-1")
    assert second.topology_id == first.topology_id
    assert len(zk_client.get_children(PATHS.storms)) == 1
    kill = pb.KillTopologyRequest(name="wc", wait_s=60, client_request_id="req-kill-1")
    assert client.call_leader("KillTopology", kill).status == records.KILLED
    # Same id again: the first outcome, not "already killed" work done twice.
    replay = client.call_leader("KillTopology", kill)
    assert (replay.topology_id, replay.status) == (first.topology_id, records.KILLED)


def test_a_submit_in_flight_when_the_leader_dies_yields_exactly_one_topology(
    spawn: Spawn, tmp_path: Path, zk_client: KazooClient
) -> None:
    replicas = [spawn() for _ in range(3)]
    leader_reply = wait_for_agreed_leader(replicas, timeout=30)
    leader = next(r for r in replicas if r.address == leader_reply.replica_id)
    followers = [r for r in replicas if r is not leader]
    path, _ = package(tmp_path, "wc")
    outcome: list[object] = []
    for follower in followers:  # hold the replication wait open
        follower.send(signal.SIGSTOP)
    client = NimbusClient([r.address for r in replicas], deadline=60, attempts=200)

    def run() -> None:
        try:
            outcome.append(submit(client, path, "wc"))
        except Exception as e:
            outcome.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        wait_until(lambda: zk_client.get_children(PATHS.code_distributor), timeout=20)
    finally:
        leader.stop(signal.SIGKILL)
        for follower in followers:
            follower.send(signal.SIGCONT)
    worker.join(timeout=90)
    client.close()
    assert len(outcome) == 1 and isinstance(outcome[0], pb.SubmitTopologyResponse), outcome
    names = [
        records.StormBase.FromString(zk_client.get(PATHS.storm(t))[0]).name
        for t in zk_client.get_children(PATHS.storms)
    ]
    assert names == ["wc"]


@pytest.mark.parametrize("bad", ["a/b", "..", ".", "", "x" * 129])
def test_bad_names_are_refused_and_nothing_is_written(
    spawn: Spawn, tmp_path: Path, zk_client: KazooClient, bad: str
) -> None:
    replica = lone_leader(spawn)
    path, _ = package(tmp_path, "p")
    with NimbusClient([replica.address], attempts=1) as client:
        with pytest.raises(NimbusCallError) as refused:
            submit(client, path, bad)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "invalid topology name" in str(refused.value)
    assert zk_client.get_children(PATHS.storms) == []
    assert zk_client.get_children(PATHS.code_distributor) == []
