"""Each checker catches a planted violation, on real ZooKeeper state where it reads any.

Terms are taken with the real take-office multi-op and records written through the
real ``FencedWriter``; the violations are planted the way a bug would make them: a raw
kazoo write that bypasses fencing, a lost or invented topology, a damaged package, a
client that goes back in epoch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from cluster.api import records
from cluster.paths import Paths
from code_sync.package import make_package
from fencing import FencedWriter, LeadershipToken, NotLeaderError
from fencing.office import take_office
from tests.chaos.checkers import s1_terms, s2_reflected, s3_code, s4_epochs
from tests.chaos.harness import ROOT, verified_copies
from tests.chaos.history import Call, History
from tests.chaos.state import read_state

PATHS = Paths(ROOT)


def _lead(client: KazooClient, who: str) -> tuple[Lock, FencedWriter]:
    lock = Lock(client, PATHS.leader_lock, identifier=who)
    assert lock.acquire(timeout=10)
    node = f"{lock.path}/{lock.node}"
    epoch = take_office(
        client, Paths(ROOT), lock_node=node, holder=who, now_ms=lambda: 0, timeout=5
    )
    return lock, FencedWriter(client, LeadershipToken(node, epoch), timeout=5)


def _submit(writer: FencedWriter, history: History, name: str, digest: str = "d" * 64) -> Call:
    """What an acknowledged submit leaves: the storm and its request record, one multi-op."""
    call = Call(0, "submit", name, f"req-{name}", history.now(), digest=digest)
    tid = f"{name}-1-1"
    base = records.StormBase(
        name=name, status=records.ACTIVE, digest=digest, client_request_id=call.request_id
    )
    writer.create_record(PATHS.storm(tid), base)
    outcome = records.RequestOutcome(request_id=call.request_id, topology_id=tid)
    writer.create_record(PATHS.request(call.request_id), outcome)
    call.topology_id = tid
    call.reply_epoch = call.epoch_seen = writer.token.epoch
    call.outcome, call.end = "ok", history.now()
    history.add(call)
    return call


@pytest.fixture
def two_terms(zk_client: KazooClient) -> tuple[KazooClient, History, FencedWriter, Call]:
    """Term 1 submits ``a``; its holder steps down; term 2 submits ``b``. All clean."""
    for folder in PATHS.folders():
        zk_client.ensure_path(folder)
    history = History()
    lock, old = _lead(zk_client, "old:1")
    first = _submit(old, history, "a")
    lock.release()
    _, new = _lead(zk_client, "new:2")
    assert new.token.epoch == old.token.epoch + 1
    _submit(new, history, "b")
    state = read_state(zk_client, ROOT)
    assert s1_terms(state, history) == [] and s2_reflected(state, history) == []
    return zk_client, history, old, first


def test_s1_catches_a_write_that_bypassed_fencing(
    two_terms: tuple[KazooClient, History, FencedWriter, Call],
) -> None:
    client, history, old, first = two_terms
    stale = records.StormBase.FromString(client.get(PATHS.storm(first.topology_id))[0])
    stale.status = records.ACTIVE
    # Through fencing the deposed holder cannot write at all...
    with pytest.raises(NotLeaderError):
        old.set_record(PATHS.storm(first.topology_id), stale, version=0)
    assert s1_terms(read_state(client, ROOT), history) == []
    # ...a raw write of its old-epoch record lands, and S1 sees it outside its term.
    client.set(PATHS.storm(first.topology_id), stale.SerializeToString())
    found = s1_terms(read_state(client, ROOT), history)
    assert len(found) == 1 and first.topology_id in found[0], found
    assert f"carries epoch {old.token.epoch}" in found[0]


def test_s1_catches_an_acknowledgement_with_the_wrong_epoch(
    two_terms: tuple[KazooClient, History, FencedWriter, Call],
) -> None:
    client, history, _, first = two_terms
    first.reply_epoch += 1  # the client was told a term that did not make the record
    found = s1_terms(read_state(client, ROOT), history)
    assert len(found) == 1 and "acknowledged with epoch" in found[0], found


def test_s2_catches_a_lost_acknowledged_submit_and_an_invented_one(
    two_terms: tuple[KazooClient, History, FencedWriter, Call],
) -> None:
    client, history, _, first = two_terms
    client.delete(PATHS.storm(first.topology_id))  # an acknowledged topology vanishes
    invented = records.StormBase(name="nobody-asked", status=records.ACTIVE, epoch=2)
    client.create(PATHS.storm("nobody-asked-9-9"), invented.SerializeToString())
    found = s2_reflected(read_state(client, ROOT), history)
    assert any(first.topology_id in f and "gone" in f for f in found), found
    assert any("no call submitted" in f for f in found), found
    assert len(found) == 2, found


def test_s2_catches_an_acknowledged_kill_that_did_not_stick(
    two_terms: tuple[KazooClient, History, FencedWriter, Call],
) -> None:
    client, history, _, first = two_terms
    kill = Call(1, "kill", "a", "req-kill-a", history.now(), history.now(), "ok")
    kill.topology_id = first.topology_id
    history.add(kill)  # acknowledged, but the record says ACTIVE and nothing recorded it
    found = s2_reflected(read_state(client, ROOT), history)
    assert any("kill a: acknowledged but status" in f for f in found), found
    assert any("kill a: acknowledged but its request" in f for f in found), found


def test_s2_catches_a_refused_retry_of_a_call_that_had_landed(
    two_terms: tuple[KazooClient, History, FencedWriter, Call],
) -> None:
    client, history, _, first = two_terms
    first.outcome, first.code = "fail", "ALREADY_EXISTS"  # the retry's answer, not the first
    found = s2_reflected(read_state(client, ROOT), history)
    assert len(found) == 1 and "a retry did not return the first outcome" in found[0], found


def test_s3_catches_a_damaged_copy(zk_client: KazooClient, tmp_path: Path) -> None:
    for folder in PATHS.folders():
        zk_client.ensure_path(folder)
    package = make_package({"topology.py": b"def build(): ...\n"}, tmp_path / "p.zip")
    data = package.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    stores = [tmp_path / f"code-{i}" for i in range(3)]
    for store in stores:
        store.mkdir()
        (store / digest).write_bytes(data)
    history = History()
    _, writer = _lead(zk_client, "me:1")
    _submit(writer, history, "a", digest)
    state = read_state(zk_client, ROOT)

    def copies(d: str) -> list[int]:
        return verified_copies(stores, d)

    assert s3_code(state, copies, min_replicas=2) == []
    (stores[0] / digest).write_bytes(data[: len(data) // 2])  # truncated on one replica
    assert s3_code(state, copies, min_replicas=2) == []  # two good copies remain
    (stores[1] / digest).unlink()
    found = s3_code(state, copies, min_replicas=2)
    assert len(found) == 1 and "verified copies on [2]" in found[0], found


def test_s4_catches_a_client_going_back_in_epoch() -> None:
    history = History()
    for i, (seen, leader) in enumerate([(1, 1), (3, 3), (3, 0), (4, 4)]):
        call = Call(0, "leader" if leader else "kill", f"n{i}", "", float(i), float(i) + 0.5)
        call.outcome, call.epoch_seen, call.reply_epoch = "ok", seen, leader
        history.add(call)
    assert s4_epochs(history) == []
    late = Call(0, "leader", "", "", 9.0, 9.5, "ok", reply_epoch=2, epoch_seen=2)
    history.add(late)  # after epoch 4, a client that reports 2
    found = s4_epochs(history)
    assert len(found) == 2 and "said epoch 2 after 4" in found[0], found
