"""Beats: each queued replica's proof of life, written where silence can be seen.

A beat is one multi-op: ``check(own lock node)`` + ``set(own beat node)``. The check ties
the beat to the replica's place in the queue (a deposed replica's beat fails it and moves
nothing), and the beat node's version is what a successor watches: a version that stays
put for the silence window means the replica in front of it stopped reaching ZooKeeper
(paused, cut off, or its replies lost). Beats are not cluster state, so they bypass the
fenced writer and its lease gate: a lapsed lease must never block the write that renews it.

Silence preemption deletes the silent replica's lock node in one multi-op that also deletes
its beat node *at the version watched* and checks ``/leader-epoch``: a beat that landed
since the successor looked, or a term that changed, makes the whole delete fail.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.interfaces import IAsyncResult

from cluster.paths import Paths
from fencing import txn
from fencing.membership import ensure_folders
from fencing.ops import Check, Create, Delete, Op, SetData

#: A beat node's data: the owner's address, then the claim it announces, in milliseconds.
_LEASE_KEY = b" lease_ms="


def beat_data(owner: str, lease: float) -> bytes:
    """What one beat writes: its owner and the claim it announces (``leader.beat_lease``)."""
    return owner.encode() + _LEASE_KEY + str(max(1, round(lease * 1000))).encode()


def announced_lease(data: bytes) -> float | None:
    """The claim a beat announced, in seconds; None when it announced none (a replica of
    an older release, whose fixed lease P was checked against) or the data is damaged."""
    _, key, value = data.rpartition(_LEASE_KEY)
    if not key or not value.isdigit():
        return None
    return int(value) / 1000


class BeatOutcome(enum.Enum):
    """What one beat did; only ``LOCK_GONE`` says anything about the term."""

    OK = "committed"
    LOCK_GONE = "own lock node is gone"  # deposed or preempted: the only term-ending outcome
    NO_BEAT_NODE = "own beat node is gone"  # create it again


class PreemptOutcome(enum.Enum):
    """What a silence preemption did. ``NODE_UNKNOWN`` is the one that accuses our own
    ZooKeeper server: the preempting replica had just read the node (after a sync), and
    the quorum says it does not exist (a server behind the quorum, or a race with the
    node's own delete; the caller reads again to tell them apart)."""

    DELETED = "deleted"
    BEAT_MOVED = "the target beat since it was watched"
    TERM_CHANGED = "/leader-epoch changed"
    NODE_UNKNOWN = "ZooKeeper's quorum has no such node"
    OFFICE_REFUSED = "the take-office part failed (nothing written)"


def _preempt_outcome(ops: list[Op], results: list[Any]) -> PreemptOutcome:
    failure = txn.first_failure(results)
    if failure is None:
        return PreemptOutcome.DELETED
    index, error = failure
    op = ops[index]
    if isinstance(op, Check):
        return PreemptOutcome.TERM_CHANGED
    if isinstance(error, NoNodeError) and isinstance(op, Delete):
        return PreemptOutcome.NODE_UNKNOWN
    return PreemptOutcome.BEAT_MOVED  # a bad version, or a beat node made since


def create_beat(
    client: KazooClient, paths: Paths, *, lock_node: str, data: bytes, timeout: float
) -> BeatOutcome:
    """Create the (ephemeral) beat node of ``lock_node``; OK when it exists already.

    ``WriteOutcomeUnknown`` when the connection dropped with it in flight.
    """
    beat = Create(paths.beat(lock_node), data, ephemeral=True)
    ops: list[Op] = [Check(lock_node, -1), beat]
    for _ in range(2):
        failure = txn.first_failure(txn.commit(client, ops, timeout=timeout))
        if failure is None:
            return BeatOutcome.OK
        index, error = failure
        if index == 0:
            return BeatOutcome.LOCK_GONE
        if isinstance(error, NodeExistsError):
            return BeatOutcome.OK
        if not isinstance(error, NoNodeError):
            raise txn.conflict_for(ops[index], error) from error
        ensure_folders(client, [paths.beats])  # a cluster made before beats existed
    raise txn.conflict_for(ops[1], NoNodeError())


def send_beat(client: KazooClient, paths: Paths, *, lock_node: str, data: bytes) -> IAsyncResult:
    """Queue one beat without waiting; ``beat_outcome`` classifies its result."""
    return txn.send(client, [Check(lock_node, -1), SetData(paths.beat(lock_node), data)])


def beat_outcome(result: IAsyncResult, *, timeout: float) -> BeatOutcome:
    """The outcome of a beat ``send_beat`` queued (``WriteOutcomeUnknown`` on a lost link)."""
    results: list[Any] = txn.wait(result, timeout=timeout)
    failure = txn.first_failure(results)
    if failure is None:
        return BeatOutcome.OK
    return BeatOutcome.LOCK_GONE if failure[0] == 0 else BeatOutcome.NO_BEAT_NODE


def drop_beat(client: KazooClient, paths: Paths, *, lock_node: str, timeout: float) -> bool:
    """Delete our beat node of a lock node we left; True when it was there."""
    results = txn.commit(client, [Delete(paths.beat(lock_node))], timeout=timeout)
    return txn.first_failure(results) is None


def preempt_silent(
    client: KazooClient,
    paths: Paths,
    *,
    lock_node: str,
    beat_version: int,
    epoch_version: int,
    timeout: float,
) -> PreemptOutcome:
    """Delete a silent replica's lock node (and its beat node at ``beat_version``) if no beat
    landed since and ``/leader-epoch`` is still at ``epoch_version``.

    ``DELETED``, or which check failed (nothing written). ``WriteOutcomeUnknown`` when the
    connection dropped with it in flight.
    """
    if not paths.is_lock_node(lock_node):
        raise ValueError(f"{lock_node} is not a node of the lock queue {paths.leader_lock}")
    ops: list[Op] = [Delete(paths.beat(lock_node), beat_version), Delete(lock_node)]
    if epoch_version >= 0:  # no /leader-epoch yet: no term to check (a first winner died)
        ops.append(Check(paths.leader_epoch, epoch_version))
    return _preempt_outcome(ops, txn.commit(client, ops, timeout=timeout))


def preempt_into_office(
    client: KazooClient,
    paths: Paths,
    *,
    lock_node: str,
    beat_version: int,
    office: list[Op],
    timeout: float,
) -> PreemptOutcome:
    """``preempt_silent`` of the term's holder and our take-office in the same multi-op
    (``office``: ``fencing.office.office_ops`` for our own lock node, its ``/leader-epoch``
    write at the version that names ``lock_node``, which the epoch check needs no more).
    On a slow disk every write waits about two fsyncs: one write here, not two in a row.

    ``DELETED`` (and we are in office), which preemption check failed, or
    ``OFFICE_REFUSED`` (our node gone, the epoch taken, our beat node not as we knew it:
    nothing written). ``WriteOutcomeUnknown`` when the connection dropped with it in flight.
    """
    if not paths.is_lock_node(lock_node):
        raise ValueError(f"{lock_node} is not a node of the lock queue {paths.leader_lock}")
    if not office or not isinstance(office[0], Check):
        raise ValueError("the take-office part must begin with the check of our lock node")
    # Our own lock node's check first, as every fenced multi-op (the audit of ZooKeeper's
    # log, tests/chaos/txnlog.py, judges the first check); then the preemption's deletes.
    ops: list[Op] = [
        office[0], Delete(paths.beat(lock_node), beat_version), Delete(lock_node), *office[1:],
    ]  # fmt: skip
    results = txn.commit(client, ops, timeout=timeout)
    failure = txn.first_failure(results)
    if failure is not None and failure[0] not in (1, 2):
        return PreemptOutcome.OFFICE_REFUSED
    return _preempt_outcome(ops, results)


def preempt_beatless(
    client: KazooClient, paths: Paths, *, lock_node: str, epoch_version: int, timeout: float
) -> PreemptOutcome:
    """Delete a queued replica's lock node that never made its beat node, proving in the
    same multi-op that the beat node is still absent (create it, delete it again) and that
    ``/leader-epoch`` is still at ``epoch_version``. A first beat that landed since makes
    the create, and the whole multi-op, fail; one sent after it finds its lock node gone.

    ``DELETED``, or which check failed (nothing written).
    """
    if not paths.is_lock_node(lock_node):
        raise ValueError(f"{lock_node} is not a node of the lock queue {paths.leader_lock}")
    beat = paths.beat(lock_node)
    ops: list[Op] = [Create(beat, b"", ephemeral=True), Delete(beat), Delete(lock_node)]
    if epoch_version >= 0:
        ops.append(Check(paths.leader_epoch, epoch_version))
    return _preempt_outcome(ops, txn.commit(client, ops, timeout=timeout))


def leave_queue(
    client: KazooClient,
    *,
    lock_node: str,
    timeout: float,
    then: Callable[[], object] | None = None,
) -> bool:
    """Delete our own lock node within ``timeout`` (kazoo's ``Lock.release`` retries without
    bound while the link is down). True when deleted, False when already gone;
    ``WriteOutcomeUnknown`` when the link dropped with it in flight. ``then``: called once
    the delete is sent, before its reply (requests it sends go out behind the delete)."""
    sent = txn.send(client, [Delete(lock_node)])
    if then is not None:
        then()
    return txn.first_failure(txn.wait(sent, timeout=timeout)) is None
