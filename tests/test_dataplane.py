"""Data-plane fencing on real ZooKeeper: claims, commits under them, fenced file sinks.

The multi-process scenarios (supervisors and Spark workers killed, paused, cut off) are
in ``tests/test_dataplane_processes.py``.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from cluster.api import records
from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from devtools.faultproxy import FaultProxy
from fencing.claims import (
    ClaimHeldError,
    ClaimLostError,
    StaleAssignmentError,
    commit_marker,
    take_claim,
)
from pipeline import adopt
from pipeline.claims import NotAssignedError, SlotClaim
from pipeline.commits import Committer, FencedOffError
from pipeline.sinks import FileSink, read_batches
from tests.waiting import wait_until

ROOT = "/storm"
TID = "wc-1"
SESSION = 2.0
PATHS = Paths(ROOT)


def assign(zk: KazooClient, supervisor_id: str, slot: int = 0) -> int:
    """Write (or move) the topology's assignment as the leader would; returns its version."""
    record = records.Assignment(
        topology_id=TID,
        slots=[records.SlotAssignment(slot=slot, supervisor_id=supervisor_id)],
        digest="d" * 64,
    ).SerializeToString()
    path = PATHS.assignment(TID)
    if zk.exists(path) is None:
        zk.create(path, record, makepath=True)
    else:
        zk.set(path, record)
    stat = zk.exists(path)
    assert stat is not None
    return int(stat.version)


@pytest.fixture
def sessions(zk_hosts: str) -> Iterator[list[KazooClient]]:
    """Two more sessions: two workers' own ZooKeeper clients."""
    clients = [make_kazoo_client(zk_hosts, session_timeout=SESSION) for _ in range(2)]
    for c in clients:
        c.start(timeout=30)
    yield clients
    for c in clients:
        c.stop()
        c.close()


def slot_claim(
    client: KazooClient, supervisor_id: str = "sup-a", *, suspended_fraction: float = 0.3
) -> SlotClaim:
    return SlotClaim(
        client,
        PATHS,
        topology_id=TID,
        supervisor_id=supervisor_id,
        slot=0,
        host="127.0.0.1",
        session_timeout=SESSION,
        suspended_fraction=suspended_fraction,
    )


def test_one_holder_at_a_time_and_no_claim_on_a_stale_assignment(
    zk_client: KazooClient, sessions: list[KazooClient]
) -> None:
    a, b = sessions
    first = assign(zk_client, "sup-a")
    holder = slot_claim(a)
    token = holder.acquire(threading.Event())
    assert holder.stop_reason() is None and holder.publish_refusal() is None

    # A second claimant (a duplicate worker of the same slot) fails and gets nothing.
    with pytest.raises(ClaimHeldError):
        take_claim(
            b,
            assignment_path=PATHS.assignment(TID),
            assignment_version=first,
            epoch_path=PATHS.claims_of(TID),
            claim_path=holder.claim_path,
            record=b"",
            timeout=SESSION,
        )
    # The slot moves to sup-b: a claim checked against the version read before fails.
    moved = assign(zk_client, "sup-b")
    with pytest.raises(StaleAssignmentError):
        take_claim(
            b,
            assignment_path=PATHS.assignment(TID),
            assignment_version=first,
            epoch_path=PATHS.claims_of(TID),
            claim_path=holder.claim_path + "-other",
            record=b"",
            timeout=SESSION,
        )
    wait_until(lambda: holder.stop_reason() == "assignment moved", message="the move seen")
    assert holder.moved
    with pytest.raises(NotAssignedError):  # the old worker may not claim again
        slot_claim(sessions[0]).acquire(threading.Event())

    # The new worker waits while the old claim exists, and claims once it is gone.
    successor = slot_claim(b, "sup-b")
    got: list[int] = []
    waiting = threading.Thread(
        target=lambda: got.append(successor.acquire(threading.Event()).epoch)
    )
    waiting.start()
    waiting.join(1.0)
    assert waiting.is_alive() and not got, "it must wait for the old claim to go"
    holder.release()
    waiting.join(10)
    assert got and got[0] > token.epoch
    stat = zk_client.exists(holder.claim_path)
    assert stat is not None and stat.ephemeralOwner == b.client_id[0]
    assert moved >= 1


def test_a_commit_needs_the_claim_and_a_superseded_holder_commits_nothing(
    zk_client: KazooClient, sessions: list[KazooClient]
) -> None:
    a, b = sessions
    assign(zk_client, "sup-a")
    old = slot_claim(a)
    old_token = old.acquire(threading.Event())
    marker = PATHS.commit(TID, "out", 0)
    assert commit_marker(a, old_token, marker, b"x", timeout=SESSION) is True
    assert commit_marker(a, old_token, marker, b"x", timeout=SESSION) is False  # roll forward

    # An operator removes the claim and the slot goes to another worker: the old holder's
    # session is still alive, yet its commits are refused because the epoch moved.
    zk_client.delete(old.claim_path)
    wait_until(lambda: old.stop_reason() == "claim node gone", message="the loss seen")
    assign(zk_client, "sup-b")
    new_token = slot_claim(b, "sup-b").acquire(threading.Event())
    assert new_token.epoch > old_token.epoch
    with pytest.raises(ClaimLostError):
        commit_marker(a, old_token, PATHS.commit(TID, "out", 1), b"x", timeout=SESSION)
    assert zk_client.exists(PATHS.commit(TID, "out", 1)) is None
    assert commit_marker(b, new_token, PATHS.commit(TID, "out", 1), b"y", timeout=SESSION)


def test_a_cut_off_worker_refuses_to_publish_at_once_and_stops_after_the_fraction(
    zk_server: object, zk_hosts: str, zk_client: KazooClient
) -> None:
    host, port = zk_server.connect_string.split(",")[0].split(":")  # type: ignore[attr-defined]
    chroot = zk_hosts[zk_hosts.index("/") :]
    assign(zk_client, "sup-a")
    with FaultProxy(host, int(port)) as proxy:
        client = make_kazoo_client(f"{proxy.address}{chroot}", session_timeout=SESSION)
        client.start(timeout=30)
        try:
            claim = slot_claim(client, suspended_fraction=0.25)
            claim.acquire(threading.Event())
            committer = Committer(claim, timeout=SESSION)
            committer.commit("out", 0)
            proxy.blackhole()
            refusal = wait_until(claim.publish_refusal, timeout=10, message="publishing refused")
            assert "no word" not in str(claim.stop_reason()), "a cut is not a pause"
            with pytest.raises(FencedOffError):
                committer.commit("out", 1)
            reason = str(wait_until(claim.stop_reason, timeout=10, message="a reason to stop"))
            assert "suspended" in reason or "no word" in reason, (refusal, reason)
        finally:
            proxy.pass_through()
            proxy.reset()  # discarded bytes leave a torn stream: drop it, as a real cut would
            client.stop()
            client.close()
    assert zk_client.exists(PATHS.commit(TID, "out", 1)) is None
    assert zk_client.exists(PATHS.commit(TID, "out", 0)) is not None


def test_a_fenced_file_sink_publishes_only_committed_batches(
    spark: SparkSession, zk_client: KazooClient, sessions: list[KazooClient], tmp_path: Path
) -> None:
    a, b = sessions
    assign(zk_client, "sup-a")
    claim = slot_claim(a)
    claim.acquire(threading.Event())
    sink = FileSink(tmp_path / "out")
    sink.fence = Committer(claim, timeout=SESSION).for_sink("out")
    frame = spark.createDataFrame([("storm", 1), ("spout", 2)], "word string, count long")

    sink.write_batch(frame, 0)
    assert zk_client.exists(PATHS.commit(TID, "out", 0)) is not None

    # Batch 1 was committed by a holder that died before renaming: rolled forward.
    zk_client.create(PATHS.commit(TID, "out", 1), b"")
    sink.write_batch(frame, 1)

    # The claim is taken over: the old worker's next batch is refused and leaves nothing.
    zk_client.delete(claim.claim_path)
    assign(zk_client, "sup-b")
    slot_claim(b, "sup-b").acquire(threading.Event())
    with pytest.raises(FencedOffError):
        sink.write_batch(frame, 2)
    assert zk_client.exists(PATHS.commit(TID, "out", 2)) is None
    published = read_batches(tmp_path / "out")
    assert [batch for batch, _ in published] == [0, 1]
    assert published[0][1] == [{"word": "storm", "count": 1}, {"word": "spout", "count": 2}]
    assert not [p for p in (tmp_path / "out").iterdir() if "000000000002" in p.name]


def test_adoption_records_tell_a_live_worker_from_an_exited_or_reused_pid(tmp_path: Path) -> None:
    workers = tmp_path / "workers"
    live = subprocess.Popen(["sleep", "60"])
    exited = subprocess.Popen(["true"])
    try:
        ticks = adopt.start_ticks(live.pid)
        assert ticks is not None
        for tid, pid, start in [
            ("t-live", live.pid, ticks),
            ("t-reused", live.pid, ticks + 1),  # same pid, another process's start time
            ("t-exited", exited.pid, ticks),
        ]:
            (workers / tid).mkdir(parents=True)
            adopt.save(workers / tid, adopt.WorkerRecord(pid, start, tid, 0, "d" * 64))
        wait_until(lambda: adopt.start_ticks(exited.pid) is None, message="a zombie")
        found = adopt.running_workers(workers)
        assert [(r.topology_id, r.pid) for r in found] == [("t-live", live.pid)]
        assert adopt.load(workers / "t-reused") is None, "a dead worker's record is forgotten"
    finally:
        live.kill()
        live.wait()
        exited.wait()
    assert adopt.running_workers(workers) == []
