"""Metrics and structured logs of running replicas, read the way Prometheus and a log
shipper read them: scraped over HTTP, parsed line by line."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from cluster.api import pb
from cluster.errors import ConfigError
from nimbus.cli import logs
from nimbus.client import NimbusClient
from nimbus.config import make_config
from tests.cluster import REPO, free_port, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, package, submit, sync_flags
from tests.scrape import scrape, value
from tests.waiting import wait_until

SUBMIT = "/storm.nimbus.v1.Nimbus/SubmitTopology"
ACTIVATE = "/storm.nimbus.v1.Nimbus/ActivateTopology"
DOWNLOAD = "/storm.nimbus.v1.Nimbus/DownloadCode"


def test_scraped_metrics_tell_the_truth_before_and_after_a_failover(
    spawn: Spawn, tmp_path: Path
) -> None:
    ports = [free_port(), free_port()]
    replicas = [spawn(extra=(*sync_flags(), "--metrics-port", str(p))) for p in ports]
    first = wait_for_agreed_leader(replicas, timeout=30)
    leader_i = next(i for i, r in enumerate(replicas) if r.address == first.replica_id)
    follower_i = 1 - leader_i
    leader, follower = replicas[leader_i], replicas[follower_i]

    path, digest = package(tmp_path, "metered", size=50_000)
    with NimbusClient([r.address for r in replicas]) as client:
        submit(client, path, "metered", digest)
        # A leader-only call sent straight to the follower is refused (and counted so).
        with pytest.raises(grpc.RpcError) as refused:
            follower.stub().ActivateTopology(pb.TopologyNameRequest(name="metered"), timeout=5)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

        size = float(path.stat().st_size)
        # The follower's sync pass may finish just after the acknowledgement.
        wait_until(
            lambda: value(scrape(ports[follower_i])[1], "nimbus_code_sync_bytes_total") == size,
            timeout=15,
            message="the follower's synced bytes to equal the package size",
        )
        text, on_leader = scrape(ports[leader_i])
        _, on_follower = scrape(ports[follower_i])

        names = {line.split("{")[0].split()[0] for line in text.splitlines() if line[:1] != "#"}
        assert names and all(n.startswith("nimbus_") for n in names), sorted(names)
        assert value(on_leader, "nimbus_is_leader") == 1
        assert value(on_follower, "nimbus_is_leader") == 0
        assert value(on_leader, "nimbus_leader_epoch") == first.epoch
        assert value(on_follower, "nimbus_leader_epoch") == first.epoch
        assert value(on_leader, "nimbus_leadership_changes_total", change="elected") == 1
        assert value(on_leader, "nimbus_fenced_writes_total", result="ok") >= 1
        assert value(on_leader, "nimbus_fenced_writes_total", result="not_leader") == 0
        assert value(on_follower, "nimbus_fenced_writes_total", result="ok") == 0
        assert value(on_leader, "nimbus_code_sync_bytes_total") == 0  # it received the upload
        assert value(on_follower, "nimbus_code_missing_packages") == 0
        assert value(on_leader, "nimbus_zookeeper_connected") == 1
        calls, durations = "nimbus_grpc_requests_total", "nimbus_grpc_request_duration_seconds"
        assert value(on_leader, calls, method=SUBMIT, code="OK") == 1
        assert value(on_leader, f"{durations}_count", method=SUBMIT, code="OK") == 1
        assert value(on_follower, calls, method=ACTIVATE, code="FAILED_PRECONDITION") == 1
        assert value(on_leader, calls, method=DOWNLOAD, code="OK") >= 1  # the follower's sync

        assert leader.stop(signal.SIGTERM) == 0, leader.log_tail()
        second = wait_for_agreed_leader([follower], timeout=30, newer_than=first.epoch)
        assert second.replica_id == follower.address
        client.call_leader("DeactivateTopology", pb.TopologyNameRequest(name="metered"))

    _, after = scrape(ports[follower_i])
    assert value(after, "nimbus_is_leader") == 1
    assert value(after, "nimbus_leader_epoch") == second.epoch > first.epoch
    assert value(after, "nimbus_leadership_changes_total", change="elected") == 1
    assert value(after, "nimbus_leadership_changes_total", change="deposed") == 0
    assert value(after, "nimbus_fenced_writes_total", result="ok") >= 1


def test_logs_are_one_json_object_per_line_naming_replica_and_epoch(spawn: Spawn) -> None:
    replica = spawn()
    leader = wait_for_agreed_leader([replica], timeout=30)
    # It answers as leader from its take-office on; its duties start (and log) a round
    # trip later. A SIGTERM in between ends the term before "leading" is ever logged.
    leading = f"leading with epoch {leader.epoch}"
    wait_until(lambda: leading in replica.log_path.read_text(), timeout=30, message=leading)
    assert replica.stop(signal.SIGTERM) == 0, replica.log_tail()

    events = []
    for line in replica.log_path.read_text().splitlines():
        if line.startswith("serving "):
            continue  # the one plain readiness line `nimbus serve` prints on stdout
        events.append(json.loads(line))  # anything else must be one JSON event per line
    assert events
    assert all(e["replica"] == replica.address for e in events)
    assert all({"time", "level", "logger", "message", "epoch"} <= e.keys() for e in events)
    took = [e for e in events if e["message"] == leading]
    assert took and took[0]["epoch"] == leader.epoch
    assert events[0]["epoch"] == 0  # before any leader was known


def test_bad_metrics_port_and_log_format_are_refused_by_name(tmp_path: Path) -> None:
    base = {"zookeeper": "z:1", "listen": "127.0.0.1:7000", "code_dir": tmp_path}
    with pytest.raises(ConfigError, match="--metrics-port must be within"):
        make_config(**base, metrics_port=70000)
    with pytest.raises(ConfigError, match="--metrics-port 7000 is the gRPC port"):
        make_config(**base, metrics_port=7000)
    with pytest.raises(ConfigError, match="--log-format must be one of json, text"):
        logs.configure("INFO", "yaml")


def test_a_taken_metrics_port_stops_serve_with_a_message(zk_hosts: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable, "-m", "nimbus.cli", "serve", "--zookeeper", zk_hosts,
                "--listen", f"127.0.0.1:{free_port()}", "--metrics-port", str(port),
                "--code-dir", str(tmp_path / "code"),
            ],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr


def test_an_absent_metric_fails_instead_of_reading_zero() -> None:
    from tests.scrape import MissingMetric, Samples

    samples: Samples = {("nimbus_is_leader", frozenset()): 1.0}
    assert value(samples, "nimbus_is_leader") == 1.0
    with pytest.raises(MissingMetric, match="nimbus_is_leadr"):
        value(samples, "nimbus_is_leadr")  # a rename: == 0 asserts would have passed
