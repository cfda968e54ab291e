"""Beat writes and the silence preemption's multi-op on a real ZooKeeper (``fencing.beats``)."""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.paths import Paths
from fencing import txn
from fencing.beats import (
    BeatOutcome,
    PreemptOutcome,
    beat_data,
    beat_outcome,
    create_beat,
    preempt_beatless,
    preempt_silent,
    send_beat,
)

PATHS = Paths("/storm")


def _queued(client: KazooClient, owner: str) -> str:
    client.ensure_path(PATHS.leader_lock)
    lock_node: str = client.create(
        f"{PATHS.leader_lock}/x__lock__", owner.encode(), ephemeral=True, sequence=True
    )
    assert create_beat(
        client, PATHS, lock_node=lock_node, data=beat_data(owner, 0.4), timeout=5
    ) is (BeatOutcome.OK)
    return lock_node


def _beat(client: KazooClient, lock_node: str) -> BeatOutcome:
    return beat_outcome(
        send_beat(client, PATHS, lock_node=lock_node, data=beat_data("a:1", 0.4)), timeout=5
    )


def test_a_beat_moves_the_version_and_a_deposed_one_moves_nothing(zk_client: KazooClient) -> None:
    lock_node = _queued(zk_client, "a:1")
    beat = PATHS.beat(lock_node)
    assert zk_client.exists(beat).version == 0
    assert _beat(zk_client, lock_node) is BeatOutcome.OK
    assert zk_client.exists(beat).version == 1
    zk_client.delete(lock_node)
    assert _beat(zk_client, lock_node) is BeatOutcome.LOCK_GONE
    assert zk_client.exists(beat).version == 1, "a beat without its lock node wrote"


def test_silence_preemption_is_refused_once_a_beat_landed(zk_client: KazooClient) -> None:
    """The successor watched version 0; the leader beat once more before the delete: the
    whole multi-op fails and the leader keeps its lock node."""
    lock_node = _queued(zk_client, "a:1")
    zk_client.create(PATHS.leader_epoch, b"")
    assert _beat(zk_client, lock_node) is BeatOutcome.OK
    assert (
        preempt_silent(
            zk_client, PATHS, lock_node=lock_node, beat_version=0, epoch_version=0, timeout=5
        )
        is PreemptOutcome.BEAT_MOVED
    )
    assert zk_client.exists(lock_node) is not None
    zk_client.set(PATHS.leader_epoch, b"another term")
    assert (
        preempt_silent(
            zk_client, PATHS, lock_node=lock_node, beat_version=1, epoch_version=0, timeout=5
        )
        is PreemptOutcome.TERM_CHANGED
    )
    assert zk_client.exists(lock_node) is not None
    assert (
        preempt_silent(
            zk_client, PATHS, lock_node=lock_node, beat_version=1, epoch_version=1, timeout=5
        )
        is PreemptOutcome.DELETED
    )
    assert zk_client.exists(lock_node) is None
    assert zk_client.exists(PATHS.beat(lock_node)) is None


def test_a_queued_replica_without_a_beat_node_is_preempted_only_while_it_has_none(
    zk_client: KazooClient,
) -> None:
    zk_client.ensure_path(PATHS.leader_lock)
    zk_client.ensure_path(PATHS.beats)
    zk_client.create(PATHS.leader_epoch, b"")
    frozen: str = zk_client.create(
        f"{PATHS.leader_lock}/x__lock__", b"a:1", ephemeral=True, sequence=True
    )
    beating = _queued(zk_client, "b:2")  # it has its beat node
    assert preempt_beatless(zk_client, PATHS, lock_node=beating, epoch_version=0, timeout=5) is (
        PreemptOutcome.BEAT_MOVED
    ), "a beat node exists: the create fails, nothing is deleted"
    assert zk_client.exists(beating) is not None
    assert preempt_beatless(zk_client, PATHS, lock_node=frozen, epoch_version=1, timeout=5) is (
        PreemptOutcome.TERM_CHANGED
    ), "another term: refused"
    assert zk_client.exists(frozen) is not None
    assert preempt_beatless(zk_client, PATHS, lock_node=frozen, epoch_version=0, timeout=5) is (
        PreemptOutcome.DELETED
    )
    assert zk_client.exists(frozen) is None
    assert zk_client.exists(PATHS.beat(frozen)) is None, "the proof leaves no beat node"
    assert create_beat(
        zk_client, PATHS, lock_node=frozen, data=beat_data("a:1", 0.4), timeout=5
    ) is (BeatOutcome.LOCK_GONE), "its first beat, late, finds its lock node gone"


def test_a_preemption_of_a_node_the_quorum_lacks_says_so(zk_client: KazooClient) -> None:
    """The outcome that accuses our own server: the node we read is not at the quorum."""
    lock_node = _queued(zk_client, "a:1")
    zk_client.create(PATHS.leader_epoch, b"")
    assert _beat(zk_client, lock_node) is BeatOutcome.OK
    zk_client.delete(PATHS.beat(lock_node))
    zk_client.delete(lock_node)
    assert (
        preempt_silent(
            zk_client, PATHS, lock_node=lock_node, beat_version=1, epoch_version=0, timeout=5
        )
        is PreemptOutcome.NODE_UNKNOWN
    )
    assert preempt_beatless(zk_client, PATHS, lock_node=lock_node, epoch_version=0, timeout=5) is (
        PreemptOutcome.NODE_UNKNOWN
    )


def test_the_quorum_is_asked_whether_a_node_exists_and_nothing_is_written(
    zk_client: KazooClient,
) -> None:
    """What the silence watch asks of each new node in front of it, and after a
    reconnect: the ZooKeeper leader's answer, not our server's."""
    lock_node = _queued(zk_client, "a:1")
    before = zk_client.exists(lock_node)
    assert before is not None
    assert txn.exists_at_quorum(zk_client, lock_node, timeout=5) is True
    after = zk_client.exists(lock_node)
    assert after is not None and after.mzxid == before.mzxid, "nothing written"
    zk_client.delete(lock_node)
    assert txn.exists_at_quorum(zk_client, lock_node, timeout=5) is False
