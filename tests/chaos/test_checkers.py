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
from devtools.zkserver import ZooKeeperCluster
from fencing import FencedWriter, LeadershipToken, NotLeaderError
from fencing.office import take_office
from tests.chaos.availability import Window, met
from tests.chaos.checkers import s1_terms, s2_reflected, s3_code, s4_epochs, stale_claims
from tests.chaos.harness import ROOT, verified_copies
from tests.chaos.history import Call, History
from tests.chaos.nemesis import FAULTS
from tests.chaos.state import read_state
from tests.chaos.txnlog import read_txns, s1_txnlog

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


def _three_copies(client: KazooClient, tmp_path: Path) -> tuple[list[Path], bytes, str]:
    """The layout's folders, and one package stored verified on three replicas' stores."""
    for folder in PATHS.folders():
        client.ensure_path(folder)
    package = make_package({"topology.py": b"def build(): ...\n"}, tmp_path / "p.zip")
    data = package.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    stores = [tmp_path / f"code-{i}" for i in range(3)]
    for store in stores:
        store.mkdir()
        (store / digest).write_bytes(data)
    return stores, data, digest


def test_s3_catches_a_damaged_copy(zk_client: KazooClient, tmp_path: Path) -> None:
    stores, data, digest = _three_copies(zk_client, tmp_path)
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


def test_s3_catches_an_acknowledgement_before_enough_copies(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    """The final state has every copy (the replicas caught up later): only what was read
    at the acknowledgement shows that the leader answered with one copy."""
    stores, _, digest = _three_copies(zk_client, tmp_path)
    history = History()
    _, writer = _lead(zk_client, "me:1")
    call = _submit(writer, history, "a", digest)
    call.holders_at_ack, call.copies_at_ack = ["me:1", "peer:2"], [0, 1]
    state = read_state(zk_client, ROOT)

    def copies(d: str) -> list[int]:
        return verified_copies(stores, d)

    assert s3_code(state, copies, 2, history) == []
    call.holders_at_ack, call.copies_at_ack = ["me:1"], [0]  # acknowledged with one copy
    assert s3_code(state, copies, 2) == [], "the final state alone cannot see it"
    found = s3_code(state, copies, 2, history)
    assert len(found) == 1 and "submit a: acknowledged with verified copies on [0]" in found[0]
    # A stale or failed holder read (a ZooKeeper server cut from its peers) is no evidence.
    call.holders_at_ack, call.copies_at_ack = [], [0, 1, 2]
    assert s3_code(state, copies, 2, history) == []


def _old_s4(history: History) -> list[str]:
    """The checker S4 replaced: it read the client's own filtered maximum epoch."""
    found: list[str] = []
    highest = 0
    for call in sorted(history.snapshot(), key=lambda c: c.start):
        if call.epoch_seen < highest:
            found.append(f"{call.name}: {call.epoch_seen} after {highest}")
        highest = max(highest, call.epoch_seen)
    return found


def _ack(history: History, name: str, at: float, epoch: int, seen: int) -> Call:
    call = Call(0, "kill", name, f"req-{name}", at, at + 0.5, "ok")
    call.reply_epoch, call.epoch_seen = epoch, seen
    history.add(call)
    return call


def test_s4_catches_an_acknowledgement_from_an_older_term() -> None:
    history = History()
    _ack(history, "a", 0.0, 3, 3)
    _ack(history, "b", 1.0, 4, 4)
    assert s4_epochs(history) == []
    _ack(history, "c", 2.0, 3, 4)  # a deposed leader acknowledged; the client's max stays 4
    assert _old_s4(history) == [], "the client's filtered view hides it"
    found = s4_epochs(history)
    assert len(found) == 1 and "kill c acknowledged in epoch 3 after kill b" in found[0], found


def test_s4_catches_two_replicas_claiming_one_epoch() -> None:
    history = History()
    _ack(history, "a", 0.0, 5, 5).leader_claims = [("a:1", 5)]
    _ack(history, "b", 1.0, 5, 5).leader_claims = [("a:1", 5)]
    assert s4_epochs(history) == []
    _ack(history, "c", 2.0, 5, 5).leader_claims = [("b:2", 5)]
    assert _old_s4(history) == []
    found = s4_epochs(history)
    assert found == ["epoch 5 claimed by ['a:1', 'b:2']"], found


def test_s4_catches_two_replicas_leading_at_once() -> None:
    history = History()
    # A handover: replica 0 leads epoch 5, then replica 1 epoch 6. Clean.
    history.leadership = [(0.0, 0.01, 0, 5), (0.2, 0.21, 0, 5), (1.0, 1.01, 1, 6)]
    assert s4_epochs(history) == []
    # Replica 0 still answers as leader of epoch 5 after replica 1 led epoch 6.
    history.leadership.append((1.5, 1.51, 0, 5))
    assert _old_s4(history) == []
    found = s4_epochs(history)
    assert len(found) == 1 and "replica 0 answered as leader of epoch 5" in found[0], found


def test_s1_from_the_transaction_log_catches_a_zombie_write_later_overwritten(
    zk_server: ZooKeeperCluster,
    two_terms: tuple[KazooClient, History, FencedWriter, Call],
) -> None:
    """The final state shows only each record's last write: a raw write of the deposed
    holder, overwritten by the real leader right after, is visible in the log alone."""
    client, history, _, first = two_terms
    root = f"{client.chroot}{ROOT}"
    assert s1_txnlog(read_txns(zk_server), root) == [], "the two terms were clean"
    stale = records.StormBase.FromString(client.get(PATHS.storm(first.topology_id))[0])
    client.set(PATHS.storm(first.topology_id), stale.SerializeToString())  # the zombie
    _, leader = _lead_again(client)
    leader.update_record(PATHS.storm(first.topology_id), records.StormBase.FromString, _touch)
    assert s1_terms(read_state(client, ROOT), history) == [], "the final state is clean"
    found = s1_txnlog(read_txns(zk_server), root)
    assert len(found) == 1 and "not a fenced multi-op" in found[0], found
    assert PATHS.storm(first.topology_id) in found[0]


def _lead_again(client: KazooClient) -> tuple[Lock, FencedWriter]:
    for child in client.get_children(PATHS.leader_lock):  # the term-2 holder steps down
        client.delete(f"{PATHS.leader_lock}/{child}")
    return _lead(client, "third:3")


def _touch(base: records.StormBase) -> None:
    base.num_workers += 1


def test_stale_claims_sees_an_old_leader_claiming_after_the_new_term() -> None:
    """Planted: replica 0 (term 3) still answers as leader to requests sent after replica
    1's answer claiming term 4 was received. The old check stopped recording at the first
    sight of term 4 and saw nothing."""
    samples = [
        (1.00, 1.01, 0, 3),
        (1.05, 1.06, 1, 4),
        (1.10, 1.11, 0, 3),  # stale: asked after term 4 was seen at 1.06
        (1.15, 1.16, 1, 4),
        (1.20, 1.21, 0, 3),  # stale
    ]
    assert len(stale_claims(samples, old=0, epoch=3)) == 2
    clean = [(1.00, 1.01, 0, 3), (1.05, 1.06, 1, 4), (1.10, 1.11, 1, 4)]
    assert stale_claims(clean, old=0, epoch=3) == []
    assert stale_claims([(1.0, 1.01, 0, 3)], old=0, epoch=3) == [], "no newer term"


def test_stale_claims_orders_answers_not_polls() -> None:
    """One poll asks replica 0, then replica 1: replica 0's answer from before the new term
    and replica 1's from after it share the poll but are no overlap (CI saw this called
    one); replica 0 asked after replica 1 answered is."""
    one_poll = [(2.000, 2.004, 0, 3), (2.005, 2.009, 1, 4)]
    assert stale_claims(one_poll, old=0, epoch=3) == []
    old_after = [(2.000, 2.004, 1, 4), (2.005, 2.009, 0, 3)]
    assert len(stale_claims(old_after, old=0, epoch=3)) == 1


def test_a_pause_as_long_as_the_silence_window_is_a_failover_not_a_ride_through() -> None:
    """pause-leader-T/2 is 1 s at T = 2 s (the same leader must ride it out) and 10 s at
    T = 20 s (silence preemption must replace the leader within P + 2 s)."""
    kind = FAULTS["pause-leader-T/2"]
    assert kind.target_at(2.0) == "same-leader"
    assert kind.target_at(20.0) == "P+2"
    assert FAULTS["sigkill-leader"].target_at(20.0) == "T+2"
    assert met("P+2", Window(gap=3.9, after_heal=None, leader_changed=True), 20.0)
    assert not met("P+2", Window(gap=4.1, after_heal=None, leader_changed=True), 20.0)


def test_s2_forgives_a_request_record_the_leader_pruned_and_no_other(
    zk_client: KazooClient,
) -> None:
    """The leader keeps only its newest request records: an acknowledged call older than
    every record kept may have lost its record to pruning; a newer one may not."""
    for folder in PATHS.folders():
        zk_client.ensure_path(folder)
    history = History()
    _, writer = _lead(zk_client, "l:1")
    calls = [_submit(writer, history, name) for name in ("old", "mid", "new")]
    for call in calls:  # each record stamped with the wall time its call ended
        path = PATHS.request(call.request_id)
        outcome = records.RequestOutcome.FromString(zk_client.get(path)[0])
        outcome.time_ms = int((history.wall0 + call.end) * 1000)
        zk_client.set(path, outcome.SerializeToString())
    zk_client.delete(PATHS.request(calls[0].request_id))  # pruned: older than all kept
    assert s2_reflected(read_state(zk_client, ROOT), history, requests_kept=2) == []
    found = s2_reflected(read_state(zk_client, ROOT), history, requests_kept=3)
    assert any("old: acknowledged but its request is not recorded" in f for f in found), found
    zk_client.delete(PATHS.request(calls[2].request_id))  # lost: newer than a kept one
    found = s2_reflected(read_state(zk_client, ROOT), history, requests_kept=1)
    assert any("new: acknowledged but its request is not recorded" in f for f in found), found


def test_s1_from_the_transaction_log_judges_fenced_multi_ops(
    zk_server: ZooKeeperCluster, zk_client: KazooClient
) -> None:
    """A multi-op fenced on a lock node that is second in the queue is no term's write.
    The log prints each path of a multi-op after its length in four bytes: a parser that
    expected blanks read no operation of any multi-op and judged none (it passed this)."""
    for folder in PATHS.folders():
        zk_client.ensure_path(folder)
    root = f"{zk_client.chroot}{ROOT}"
    lock, writer = _lead(zk_client, "holder:1")
    _submit(writer, History(), "clean")
    assert s1_txnlog(read_txns(zk_server), root) == [], "the term was clean"
    second = zk_client.create(
        f"{PATHS.leader_lock}/x__lock__", b"second", ephemeral=True, sequence=True
    )
    zombie = zk_client.transaction()
    zombie.check(second, -1)
    zombie.create(PATHS.storm("zombie"), b"z")
    assert all(r is True or isinstance(r, str) for r in zombie.commit())
    found = s1_txnlog(read_txns(zk_server), root)
    assert len(found) == 1 and "while" in found[0] and "first in the queue" in found[0], found
    assert PATHS.storm("zombie") in found[0]
    lock.release()
