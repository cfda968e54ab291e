"""``deploy/containers/rollout`` with podman: every replica of an ``up`` cluster restarted,
leadership moved exactly once, and a CLI user on the host never sees a call fail.

The user deactivates and activates a submitted topology in a loop (each call a fenced
write on the leader) while the rollout runs. The terms are counted by the leader's
epoch, which grows by one per term whoever begins it, so "one handover" is exactly one
new epoch. The image fixture is ``tests/test_containers.py``'s; every wait is a bounded
poll. The TLS case (``up --secrets``) is ``tests/test_containers_secure.py``'s cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.cluster import REPO
from tests.containers_cluster import CONTAINERS, NIMBUS, engine_env, podman
from tests.test_containers import SESSION_TIMEOUT, Image, image
from tests.test_containers_secure import SecureCluster, secure
from tests.waiting import wait_until

__all__ = ["image", "secure"]  # the session's image and the TLS cluster, shared

pytestmark = pytest.mark.timeout(900)


@dataclass
class UpCluster:
    name: str
    seeds: list[str]  # host-published HOST:PORT of each replica
    containers: list[str]


@pytest.fixture(scope="module")
def up(image: Image) -> Iterator[UpCluster]:
    """deploy/containers/up: ZooKeeper and three replicas (no supervisor: none is needed
    to submit, deactivate and activate)."""
    name = f"nimbus-roll-{os.getpid()}"
    done = subprocess.run(
        [str(CONTAINERS / "up"), "--name", name, "--replicas", "3", "--supervisors", "0",
         "--session-timeout", str(SESSION_TIMEOUT), "--image", image.ref],
        capture_output=True, text=True, env=engine_env(), timeout=300,
    )  # fmt: skip
    try:
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        seeds, containers = [], []
        for line in done.stdout.splitlines():
            if line.startswith("nimbus replica"):
                fields = line.split()
                seeds.append(fields[2])
                containers.append(fields[fields.index("(container") + 1].rstrip(","))
        yield UpCluster(name, seeds, containers)
    finally:
        subprocess.run(
            [str(CONTAINERS / "down"), "--name", name, "--volumes"],
            capture_output=True, env=engine_env(), timeout=120,
        )  # fmt: skip


def nimbus(*args: str, seeds: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIMBUS_")}
    return subprocess.run(
        [NIMBUS, *args, "--seeds", ",".join(seeds)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def leader_epoch(seeds: list[str]) -> tuple[str, int] | None:
    shown = nimbus("leader", "--json", seeds=seeds)
    if shown.returncode != 0:
        return None
    reply = json.loads(shown.stdout)
    return str(reply["address"]), int(reply["epoch"])


def started_at(containers: list[str]) -> dict[str, str]:
    return {c: podman("inspect", "-f", "{{.State.StartedAt}}", c).strip() for c in containers}


def rollout(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONTAINERS / "rollout"), "--name", name],
        capture_output=True, text=True, env=engine_env(), timeout=600,
    )  # fmt: skip


def workload(
    seeds: list[str], stop: threading.Event, failures: list[str], calls: list[int]
) -> None:
    """A CLI user meanwhile: deactivate and activate, each a fenced write on the leader."""
    verbs = ("deactivate", "activate")
    while not stop.is_set():
        done = nimbus(verbs[len(calls) % 2], "wordcount", seeds=seeds)
        calls.append(done.returncode)
        if done.returncode != 0:
            failures.append(done.stderr[-500:])


def test_rollout_restarts_every_replica_and_moves_leadership_once(up: UpCluster) -> None:
    example = REPO / "examples" / "wordcount"
    config = {"input": "/var/lib/nimbus-data/input", "output": "/var/lib/nimbus-data/output"}
    submitted = nimbus(
        "submit", str(example), "--name", "wordcount", "--config-json", json.dumps(config),
        seeds=up.seeds,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr

    def all_hold_the_code() -> bool:
        listed = nimbus("nimbuses", "--json", seeds=up.seeds)
        rows = json.loads(listed.stdout) if listed.returncode == 0 else []
        return len(rows) == 3 and all(n["code_sync_lag"] == 0 for n in rows)

    wait_until(all_hold_the_code, timeout=60, message="three replicas holding the code")
    before = leader_epoch(up.seeds)
    assert before is not None
    starts = started_at(up.containers)

    stop = threading.Event()
    failures: list[str] = []
    calls: list[int] = []
    worker = threading.Thread(target=workload, args=(up.seeds, stop, failures, calls))
    worker.start()
    try:
        wait_until(lambda: len(calls) >= 2, timeout=60, message="the workload running")
        done = rollout(up.name)
        during = len(calls)
        wait_until(lambda: len(calls) >= during + 2 or not worker.is_alive(), timeout=60,
                   message="the workload going on after the rollout")  # fmt: skip
    finally:
        stop.set()
        worker.join(120)
    print(f"\n{done.stdout}{len(calls)} CLI calls, {len(failures)} failed")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert failures == [] and len(calls) >= 4

    lines = done.stdout.splitlines()
    restarted = [line.split()[1] for line in lines if line.startswith("restarted")]
    assert sorted(restarted) == sorted(up.containers)
    assert advertised_by(restarted[-1]) == before[0], "the leader restarted last"
    after_starts = started_at(up.containers)
    assert all(after_starts[c] != starts[c] for c in up.containers), (starts, after_starts)
    handovers = [line for line in lines if line.startswith("handover")]
    assert len(handovers) == 1, done.stdout
    after = leader_epoch(up.seeds)
    assert after is not None
    assert after[1] == before[1] + 1, f"one new term: {before} -> {after}"
    assert after[0] != before[0] and f"-> {after[0]} " in handovers[0]


def advertised_by(container: str) -> str:
    """The address ``container`` advertises (its replica id)."""
    env: list[str] = json.loads(podman("inspect", "-f", "{{json .Config.Env}}", container))
    return next(e.split("=", 1)[1] for e in env if e.startswith("NIMBUS_ADVERTISE="))


def test_rollout_of_a_cluster_with_secrets_probes_and_hands_over_over_tls(
    secure: SecureCluster,
) -> None:
    """The probe and the handover speak TLS with the token, as up --secrets set them."""

    def leader() -> tuple[str, int] | None:
        shown = secure.cli("leader", "--json")
        if shown.returncode != 0:
            return None
        reply = json.loads(shown.stdout)
        return str(reply["address"]), int(reply["epoch"])

    wait_until(lambda: leader() is not None, timeout=60, message="a leader over TLS")
    before = leader()
    assert before is not None
    done = rollout(secure.name)
    print(f"\n{done.stdout}")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert sum(line.startswith("restarted") for line in done.stdout.splitlines()) == 3
    assert sum(line.startswith("handover") for line in done.stdout.splitlines()) == 1
    after = leader()
    assert after is not None and after[1] == before[1] + 1 and after[0] != before[0]
