"""A planned handover (``nimbus handover``): to the replica named, once, with no failed
call; refused, changing nothing, when it cannot be done."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import CancelledError, ConnectionClosedError
from kazoo.recipe.lock import Lock

from cluster.api import pb, records
from cluster.apierror import ApiError
from fencing import FencedWriter
from nimbus.client import NimbusClient
from nimbus.duties.handover import Handover, StepAside, lock_queue
from tests.cluster import REPO, Replica, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, package, submit
from tests.test_scheduler import PATHS
from tests.test_scheduler_duty import lead
from tests.waiting import wait_until


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nimbus.cli", *args],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip


def _wait_in_queue(lock: Lock) -> None:
    with contextlib.suppress(CancelledError, ConnectionClosedError):  # the test's end
        lock.acquire()


def _queue(zk: KazooClient, *replicas: str) -> list[Lock]:
    """Replicas queued behind the leader with kazoo's lock recipe, as their electors queue
    (each waits in a thread of its own; cancelled at the end)."""
    locks = [Lock(zk, PATHS.leader_lock, identifier=rid) for rid in replicas]
    for count, lock in enumerate(locks, start=len(zk.get_children(PATHS.leader_lock)) + 1):
        threading.Thread(target=_wait_in_queue, args=(lock,), daemon=True).start()

        def queued(n: int = count) -> bool:
            return len(zk.get_children(PATHS.leader_lock)) == n

        wait_until(queued, timeout=10)
    return locks


@pytest.fixture
def leader_state(zk_client: KazooClient) -> Iterator[tuple[FencedWriter, Handover]]:
    """A leader "L" (lock and office taken as a replica does), "B" queued and holding the
    code of the live topology ``wc``, "C" queued without it, "D" registered, not queued."""
    _, writer = lead(zk_client, "L")
    queued = _queue(zk_client, "B", "C")
    for rid in ("L", "B", "C", "D"):
        zk_client.create(PATHS.nimbus(rid), b"", ephemeral=True, makepath=True)
    writer.create_record(PATHS.storm("wc-1-1"), records.StormBase(name="wc"))
    writer.create_record(
        PATHS.storm("old-1-1"), records.StormBase(name="old", status=records.KILLED)
    )
    for rid in ("L", "B"):
        zk_client.create(PATHS.code_holder("wc-1-1", rid), b"x", makepath=True)
    handover = Handover(zk_client, PATHS, "L", current_writer=lambda: writer, new_term_wait=1.0)
    yield writer, handover
    for lock in queued:
        lock.cancel()


@pytest.mark.parametrize(
    ("to", "code", "words"),
    [
        ("L", grpc.StatusCode.INVALID_ARGUMENT, "is the leader itself"),
        ("X:1", grpc.StatusCode.NOT_FOUND, "no replica X:1 is registered"),
        ("D", grpc.StatusCode.FAILED_PRECONDITION, "D is not queued"),
        ("C", grpc.StatusCode.FAILED_PRECONDITION, "C lacks the code of wc"),
    ],
)
def test_a_handover_that_cannot_be_done_is_refused_and_changes_nothing(
    zk_client: KazooClient,
    leader_state: tuple[FencedWriter, Handover],
    to: str,
    code: grpc.StatusCode,
    words: str,
) -> None:
    writer, handover = leader_state
    with pytest.raises(ApiError) as refused:
        handover.handover(pb.HandoverRequest(to=to, client_request_id=f"h-{code.name}"))
    assert refused.value.code == code and words in str(refused.value)
    assert not writer.token.cancelled
    assert zk_client.exists(PATHS.handover) is None
    assert zk_client.exists(PATHS.request(f"h-{code.name}")) is None


def test_the_winner_in_front_of_the_target_steps_aside_once(
    zk_client: KazooClient, leader_state: tuple[FencedWriter, Handover]
) -> None:
    writer, handover = leader_state
    with pytest.raises(ApiError, match="no new term began"):  # no elector here: none begins
        handover.handover(pb.HandoverRequest(to="B", client_request_id="h-ok"))
    assert writer.token.cancelled
    recorded = records.Handover.FromString(zk_client.get(PATHS.handover)[0])
    assert (recorded.to, recorded.epoch) == ("B", writer.token.epoch)
    assert StepAside(zk_client, PATHS, "B")() is None  # the target takes office
    c = StepAside(zk_client, PATHS, "C")
    assert c() == f"term {writer.token.epoch} was handed over to B"
    assert c() is None  # once per handover: B may have died meanwhile


def _workload(
    seeds: list[str], stop: threading.Event, failures: list[str], calls: list[int]
) -> None:
    """A CLI user meanwhile: deactivate and activate, each a fenced write on the leader."""
    verbs = ("deactivate", "activate")
    while not stop.is_set():
        done = cli(verbs[len(calls) % 2], "wc", "--seeds", ",".join(seeds))
        calls.append(done.returncode)
        if done.returncode != 0:
            failures.append(done.stderr[-300:])


def test_handover_makes_the_named_replica_lead_once_with_no_failed_call(
    spawn: Spawn, tmp_path: Path, zk_client: KazooClient
) -> None:
    replicas: list[Replica] = [spawn() for _ in range(3)]
    first = wait_for_agreed_leader(replicas, timeout=30)
    seeds = [r.address for r in replicas]
    path, _ = package(tmp_path, "wc")
    with NimbusClient(seeds) as client:
        submit(client, path, "wc")
    # The last in line: the replica in front of it must step aside.
    queue = [rid for _, rid in lock_queue(zk_client, PATHS)]
    assert queue[0] == first.replica_id and len(queue) == 3
    others, target = queue[1:], queue[-1]
    with NimbusClient(seeds) as client:  # every replica holds the code before the handover
        wait_until(
            lambda: all(n.code_sync_lag == 0 for n in client.nimbuses().nimbuses), timeout=30
        )

    stop = threading.Event()
    failures: list[str] = []
    calls: list[int] = []
    worker = threading.Thread(target=_workload, args=(seeds, stop, failures, calls))
    worker.start()
    try:
        done = cli("handover", "--to", target, "--seeds", ",".join(seeds), "--json")
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        assert reply == {"address": target, "epoch": first.epoch + 1}
        leader = wait_for_agreed_leader(replicas, timeout=30, newer_than=first.epoch)
        assert (leader.replica_id, leader.epoch) == (target, first.epoch + 1)
        in_front = next(r for r in replicas if r.address == others[0])
        assert f"stepped aside: term {first.epoch} was handed over to {target}" in (
            in_front.log_tail(400)
        )
        start = len(calls)
        while len(calls) < start + 2 and worker.is_alive():  # the workload goes on after it
            worker.join(0.2)
    finally:
        stop.set()
        worker.join(60)
    assert failures == [] and len(calls) >= 2

    # The leader itself and an unknown replica: refused, nothing changes.
    for to, words in ((target, "is the leader itself"), ("10.9.9.9:1", "is registered")):
        refused = cli("handover", "--to", to, "--seeds", ",".join(seeds))
        assert refused.returncode == 1 and words in refused.stderr, refused.stderr
    assert wait_for_agreed_leader(replicas, timeout=10).epoch == first.epoch + 1

    # The same request id twice: the first hands over; the second (at the new leader, the
    # client following the redirect) gets the first outcome, and no new term begins.
    with NimbusClient(seeds) as client:
        request = pb.HandoverRequest(to=others[0], client_request_id="handover-retry-1")
        again = client.call_leader("Handover", request)
        assert (again.address, again.epoch) == (others[0], first.epoch + 2)
        repeat = client.call_leader("Handover", request)
        assert (repeat.address, repeat.epoch) == (again.address, again.epoch)
    assert wait_for_agreed_leader(replicas, timeout=10).epoch == first.epoch + 2
