"""The StatefulSet's preStop (``nimbus prestop``): the leader hands over to a pod already
on the update revision, so an update moves leadership once; a follower does nothing.

The choice is a function of the pods the Kubernetes API lists, tested on lists written
here (an update of three pods, from the highest ordinal down, with each one leading);
the command runs against real replicas, the Kubernetes part replaced by a chosen target
or, outside a pod, falling back to the next in line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from nimbus.cli.cmd_prestop import prestop
from nimbus.client import NimbusClient
from nimbus.server import prestop as prestop_module
from nimbus.server.podlabel import PodApi
from nimbus.server.prestop import Choice, Pod, Rollout, choose, read_rollout
from tests.cluster import REPO, Replica, wait_for_agreed_leader
from tests.replica_fixtures import Spawn
from tests.test_deploy import find, nimbus_container

OLD, NEW = "old5b7c", "new9d4f"
SUFFIX = ".nimbus-headless.prod.svc.cluster.local:6627"
REPLICAS = [f"nimbus-{i}{SUFFIX}" for i in range(3)]


def pods(*revisions: str, ready: bool = True) -> tuple[Pod, ...]:
    return tuple(
        Pod(f"nimbus-{i}", rev, ready=ready, deleting=False, ip=f"10.0.0.{i + 1}")
        for i, rev in enumerate(revisions)
    )


def update(leader: int) -> list[str]:
    """Replay a StatefulSet update (nimbus-2, then -1, then -0) with ``leader`` leading at
    first; each pod's preStop hands over by ``choose`` when it leads. The leaders in turn."""
    revisions = [OLD, OLD, OLD]
    leaders = [REPLICAS[leader]]
    for ordinal in (2, 1, 0):
        if leaders[-1] == REPLICAS[ordinal]:
            rollout = Rollout(NEW, pods(*revisions))
            choice = choose(rollout, f"nimbus-{ordinal}", REPLICAS)
            # The next in line: a replica that is not the one stopping.
            nxt = choice.to or next(r for r in REPLICAS if r != REPLICAS[ordinal])
            leaders.append(nxt)
        revisions[ordinal] = NEW
    return leaders


@pytest.mark.parametrize(("leader", "moves"), [(0, 1), (1, 1), (2, 2)])
def test_an_update_of_three_pods_moves_leadership_once_unless_the_first_pod_leads(
    leader: int, moves: int
) -> None:
    leaders = update(leader)
    assert len(leaders) - 1 == moves, leaders
    assert leaders[-1] in (REPLICAS[1], REPLICAS[2])  # on the new revision, not restarted again


def test_the_target_is_ready_on_the_update_revision_and_not_the_pod_itself() -> None:
    rollout = Rollout(NEW, pods(OLD, NEW, NEW))
    assert choose(rollout, "nimbus-0", REPLICAS).to == REPLICAS[2]  # updated first
    assert choose(rollout, "nimbus-2", REPLICAS).to == REPLICAS[1]  # never itself
    not_ready = Rollout(NEW, (*pods(OLD, NEW)[:1], Pod("nimbus-1", NEW, False, False)))
    assert choose(not_ready, "nimbus-0", REPLICAS) == Choice(
        "", "no other ready pod runs the update revision yet: the next in line"
    )
    leaving = Rollout(NEW, (*pods(OLD)[:1], Pod("nimbus-1", NEW, True, deleting=True)))
    assert choose(leaving, "nimbus-0", REPLICAS).to == ""
    # Not registered (it has not joined yet): no target.
    assert choose(rollout, "nimbus-0", REPLICAS[:1]).to == ""
    # Advertised by IP: matched by the pod's IP.
    assert choose(rollout, "nimbus-0", ["10.0.0.1:6627", "10.0.0.3:6627"]).to == "10.0.0.3:6627"
    assert choose(Rollout("", pods(OLD, NEW)), "nimbus-0", REPLICAS).to == ""


def test_pods_are_read_from_the_api_by_the_statefulsets_selector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``read_rollout`` against answers shaped as the API server's."""
    pod_item: dict[str, Any] = {
        "metadata": {
            "name": "nimbus-1",
            "labels": {"app.kubernetes.io/name": "nimbus", "controller-revision-hash": NEW},
            "ownerReferences": [{"kind": "StatefulSet", "name": "nimbus"}],
        },
        "status": {"podIP": "10.0.0.2", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    leaving = {**pod_item, "metadata": {**pod_item["metadata"], "name": "nimbus-0"}}
    leaving["metadata"]["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    answers = {
        "/api/v1/namespaces/prod/pods/nimbus-0": leaving,
        "/apis/apps/v1/namespaces/prod/statefulsets/nimbus": {
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "nimbus"}}},
            "status": {"updateRevision": NEW, "currentRevision": OLD},
        },
        "/api/v1/namespaces/prod/pods?labelSelector=app.kubernetes.io/name%3Dnimbus": {
            "items": [leaving, pod_item]
        },
    }
    asked: list[str] = []

    def get(_api: PodApi, path: str, _timeout: float) -> dict[str, Any]:
        asked.append(path)
        return answers[path]

    monkeypatch.setattr(prestop_module, "_get", get)
    api = PodApi("https://k8s:443", "prod", "nimbus-0", REPO / "token", REPO / "ca.crt")
    rollout = read_rollout(api)
    assert asked == list(answers)
    assert rollout == Rollout(
        NEW,
        (
            Pod("nimbus-0", NEW, ready=True, deleting=True, ip="10.0.0.2"),
            Pod("nimbus-1", NEW, ready=True, deleting=False, ip="10.0.0.2"),
        ),
    )


def test_the_statefulset_runs_prestop_and_may_read_what_it_needs() -> None:
    container = nimbus_container()
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["nimbus", "prestop"]
    spec = find("StatefulSet", "nimbus")["spec"]
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    args = dict(zip(command[2::2], command[3::2], strict=True))
    assert float(args["--timeout"]) + float(args["--drain"]) < grace
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    rules = find("Role", "nimbus-pod-labeler")["rules"]
    allowed = {(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]}
    assert {("pods", "get"), ("pods", "list"), ("statefulsets", "get")} <= allowed
    yaml.safe_dump(spec)  # still a plain document


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "NIMBUS_"))}
    return subprocess.run(
        [sys.executable, "-m", "nimbus.cli", *args],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_the_leader_hands_over_to_the_chosen_replica_and_a_follower_does_nothing(
    spawn: Spawn,
) -> None:
    replicas: list[Replica] = [spawn() for _ in range(3)]
    first = wait_for_agreed_leader(replicas, timeout=30)
    seeds = [r.address for r in replicas]
    follower = next(a for a in seeds if a != first.replica_id)

    def to(address: str) -> Any:
        def target(registered: Sequence[str]) -> Choice:
            assert address in registered
            return Choice(address, "chosen by the test")

        return target

    with NimbusClient(seeds) as client:
        said = prestop(client, follower, to(first.replica_id))
        assert said == f"{follower} does not lead ({first.replica_id} does): nothing to hand over"
        said = prestop(client, first.replica_id, to(follower))
    assert said == f"handed over to {follower} (epoch {first.epoch + 1}): chosen by the test"
    second = wait_for_agreed_leader(replicas, timeout=30, newer_than=first.epoch)
    assert (second.replica_id, second.epoch) == (follower, first.epoch + 1)

    # Outside a pod the API cannot tell: the leader hands over to the next in line.
    done = cli("prestop", "--seeds", ",".join(seeds), "--advertise", follower,
               "--pod", "nimbus-0", "--drain", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "the Kubernetes API could not tell" in done.stdout
    third = wait_for_agreed_leader(replicas, timeout=30, newer_than=second.epoch)
    assert third.replica_id != follower and third.epoch == second.epoch + 1
    # A follower's hook changes nothing.
    done = cli("prestop", "--seeds", ",".join(seeds), "--advertise", follower, "--drain", "0")
    assert done.returncode == 0 and "nothing to hand over" in done.stdout, done.stderr
    assert wait_for_agreed_leader(replicas, timeout=10).epoch == third.epoch
