"""Taking office: the one multi-op that turns a lock winner into the leader of a new epoch.

``check(own lock node)`` + ``set /leader-epoch (n+1, expected version)`` (or create it)
+ ``create /epochs/<n+1>`` + "the last term's lock node is gone", all or nothing. The
epoch is the fencing token shown to clients and stamped into every record the leader
writes.

The last check is there because winning the lock is decided from one server's listing.
A server that diverged from its quorum (seen in the chaos soak with the ZooKeeper leader
cut from its peers: one replica's server no longer had the lock node of a term its
quorum still held, ZOOKEEPER-4837/-5010's class) let a replica win while the holder
before it still held the lock: two terms at once, and writes of the older one landed in
the newer. ``/leader-epoch`` names the last term's lock node; creating and deleting that
path in the multi-op fails (NodeExists) unless the quorum has it gone, and in a correct
history it is always gone by the time a later node wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult

from cluster.api import records
from cluster.paths import Paths
from fencing import txn
from fencing.errors import ConflictReason, NotLeaderError, WriteConflictError
from fencing.ops import Check, Create, Delete, Op, SetData
from fencing.writer import FencedWriter

TAKE_OFFICE_ATTEMPTS = 5


def read_leader_epoch(client: KazooClient, paths: Paths) -> tuple[records.LeaderEpoch | None, int]:
    """The current ``LeaderEpoch`` record and its znode version (None, -1 when absent).

    A record that does not parse is returned as None with its real version, so a
    damaged node never blocks an election: the next holder overwrites it.
    """
    return leader_epoch_of(client.get_async(paths.leader_epoch))


def leader_epoch_of(result: IAsyncResult) -> tuple[records.LeaderEpoch | None, int]:
    """``read_leader_epoch`` from a read already sent (``get_async``)."""
    try:
        data, stat = result.get()
    except NoNodeError:
        return None, -1
    try:
        return records.LeaderEpoch.FromString(data), int(stat.version)
    except DecodeError:
        return None, int(stat.version)


def highest_recorded_epoch(client: KazooClient, paths: Paths) -> int:
    return _highest(client.get_children_async(paths.epochs))


def _highest(result: IAsyncResult) -> int:
    try:
        children = result.get()
    except NoNodeError:
        return 0
    return max((int(c) for c in children if c.isdigit()), default=0)


@dataclass(frozen=True)
class OfficeReads:
    """The reads ``take_office`` decides its multi-op from, already sent: ``/leader-epoch``,
    the ``/epochs`` listing and the beat node's stat (None: no beat node asked for)."""

    leader_epoch: IAsyncResult
    epochs: IAsyncResult
    beat: IAsyncResult | None


def send_office_reads(client: KazooClient, paths: Paths, beat: str | None) -> OfficeReads:
    """Send ``take_office``'s reads without waiting: together they cost one round trip,
    and none if they ride behind another request (the lock's listing) we wait on anyway."""
    return OfficeReads(
        leader_epoch=client.get_async(paths.leader_epoch),
        epochs=client.get_children_async(paths.epochs),
        beat=client.exists_async(beat) if beat is not None else None,
    )


def office_ops(
    paths: Paths,
    *,
    lock_node: str,
    holder: str,
    epoch: int,
    epoch_version: int,
    started_ms: int,
    last_term: str,
    beat: str | None,
    beat_data: bytes,
    beat_exists: bool,
) -> tuple[list[Op], int]:
    """The take-office multi-op's operations for ``epoch`` (``/leader-epoch`` read at
    ``epoch_version``, -1: absent), and the index where the proof that ``last_term``'s
    lock node is gone starts (-1: none). With ``beat``, its beat node is written too
    (created unless ``beat_exists``: a concurrent create loses as a conflict)."""
    record = records.LeaderEpoch(
        epoch=epoch, holder=holder, lock_node=lock_node, since_ms=started_ms
    ).SerializeToString(deterministic=True)
    history = records.EpochRecord(
        epoch=epoch, holder=holder, lock_node=lock_node, started_ms=started_ms
    ).SerializeToString(deterministic=True)
    write: Op = (
        SetData(paths.leader_epoch, record, epoch_version)
        if epoch_version >= 0
        else Create(paths.leader_epoch, record)
    )
    ops: list[Op] = [Check(lock_node, -1), write, Create(paths.epoch(epoch), history)]
    absence_at = -1
    if last_term and last_term != lock_node and _folder(last_term) == _folder(lock_node):
        absence_at = len(ops)  # (a node of another folder is no term of this queue)
        ops += [Create(last_term), Delete(last_term)]
    if beat is not None:
        ops.append(
            SetData(beat, beat_data) if beat_exists else Create(beat, beat_data, ephemeral=True)
        )
    return ops, absence_at


def next_epoch(current: records.LeaderEpoch | None, epochs: IAsyncResult) -> int:
    """One above both ``/leader-epoch`` and the highest ``/epochs`` entry (a listing sent)."""
    return max(current.epoch if current else 0, _highest(epochs)) + 1


@dataclass(frozen=True)
class OfficeAttempt:
    """One take-office multi-op sent (``send_office``): what it was decided from, and its
    reply to come (``office_outcome``)."""

    result: IAsyncResult
    ops: list[Op]
    epoch: int
    absence_at: int
    last_term: str
    lock_node: str


def send_office(
    client: KazooClient,
    paths: Paths,
    sent: OfficeReads,
    *,
    lock_node: str,
    holder: str,
    now_ms: Callable[[], int],
    beat: str | None,
    beat_data: bytes,
    beat_exists: bool | None,
) -> OfficeAttempt:
    """Decide the take-office multi-op from ``sent`` (answered, or waited for here) and send
    it without waiting: ``office_outcome`` reads its reply."""
    current, version = leader_epoch_of(sent.leader_epoch)
    epoch = next_epoch(current, sent.epochs)
    last_term = current.lock_node if current is not None else ""
    there: bool | None = None
    if beat is not None and sent.beat is not None:
        there = sent.beat.get() is not None if beat_exists is None else beat_exists
    ops, absence_at = office_ops(
        paths, lock_node=lock_node, holder=holder, epoch=epoch, epoch_version=version,
        started_ms=now_ms(), last_term=last_term, beat=beat if there is not None else None,
        beat_data=beat_data, beat_exists=bool(there),
    )  # fmt: skip
    return OfficeAttempt(txn.send(client, ops), ops, epoch, absence_at, last_term, lock_node)


def office_outcome(attempt: OfficeAttempt, *, timeout: float) -> int | None:
    """The epoch ``attempt`` took; None when a write of it conflicted with a change since
    its reads (decide again from fresh reads). ``NotLeaderError`` when our lock node is
    gone, ``WriteConflictError`` when the last term's lock node is still held (nothing
    written either way), ``WriteOutcomeUnknown`` when the link dropped with it in flight."""
    failure = txn.first_failure(txn.wait(attempt.result, timeout=timeout))
    if failure is None:
        return attempt.epoch
    index, error = failure
    if index == 0:
        raise NotLeaderError(
            f"cannot take office: own lock node {attempt.lock_node} is gone"
        ) from error
    if index == attempt.absence_at:
        raise WriteConflictError(
            f"cannot take office: the last term's lock node {attempt.last_term} is still held "
            "(our ZooKeeper server showed it gone: it is behind or diverged)",
            path=attempt.last_term,
            reason=ConflictReason.EXISTS,
        ) from error
    return None


def take_office(
    client: KazooClient,
    paths: Paths,
    *,
    lock_node: str,
    holder: str,
    now_ms: Callable[[], int],
    timeout: float,
    beat: str | None = None,
    beat_data: bytes | None = None,
    reads: OfficeReads | None = None,
    beat_exists: bool | None = None,
) -> int:
    """Become leader of a new epoch; returns the epoch number.

    Raises ``NotLeaderError`` when the lock node is gone (nothing written). The epoch
    is one above both ``/leader-epoch`` and the highest ``/epochs`` entry, so it only
    ever grows even if the record was damaged. With ``beat`` (the lock node's beat node)
    the multi-op also writes it (``beat_data``, the claim it announces): taking office is
    the term's first beat. ``reads``: the first attempt's reads, sent earlier (any age:
    the multi-op checks everything it was decided from, and a conflict reads again).
    ``beat_exists``: whether the beat node exists as its writer knows it, for the first
    attempt (a read sent long before may predate the node); None: as read.
    """
    data = holder.encode() if beat_data is None else beat_data
    for _ in range(TAKE_OFFICE_ATTEMPTS):
        # The reads go out together: one round trip before the multi-op, not three.
        sent = reads if reads is not None else send_office_reads(client, paths, beat)
        reads = None  # a retry after a conflict reads afresh
        attempt = send_office(
            client, paths, sent, lock_node=lock_node, holder=holder, now_ms=now_ms,
            beat=beat, beat_data=data, beat_exists=beat_exists,
        )  # fmt: skip
        beat_exists = None
        epoch = office_outcome(attempt, timeout=timeout)
        if epoch is not None:
            return epoch
        last_error = _conflict(attempt)
    raise last_error


def _conflict(attempt: OfficeAttempt) -> WriteConflictError:
    """The conflict that made ``attempt`` (answered) fail, cause kept."""
    failure = txn.first_failure(attempt.result.get())
    assert failure is not None
    index, error = failure
    conflict = txn.conflict_for(attempt.ops[index], error)
    conflict.__cause__ = error
    return conflict


def prune_epochs(writer: FencedWriter, client: KazooClient, paths: Paths, *, keep: int) -> int:
    """Delete all but the newest ``keep`` entries of ``/epochs`` (fenced); returns count."""
    try:
        children = client.get_children(paths.epochs)
    except NoNodeError:
        return 0
    numbers = sorted(int(c) for c in children if c.isdigit())
    stale = numbers[:-keep] if keep > 0 else numbers
    if not stale:
        return 0
    writer.batch([Delete(paths.epoch(n)) for n in stale])
    return len(stale)


def _folder(path: str) -> str:
    return path.rpartition("/")[0]
