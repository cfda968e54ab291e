"""Data-plane fencing: a worker's claim on its topology slot and its commits under it.

A claim is the ephemeral ``/claims/<topology-id>/<index>`` of the worker's own session,
created in one multi-op with a check of the assignment at the version the worker read
(a worker acting on a stale assignment cannot claim) and a bump of ``/claims/<topology-id>``,
whose znode version is the claim epoch. A commit is one multi-op that checks the epoch
and the claim node and creates the batch's marker: once anyone else has claimed (epoch
moved) or this session is gone (claim node gone), nothing can be committed, not even by
a request kazoo sends late. A check followed by a separate write would leave that window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState

from fencing import txn
from fencing.errors import ConflictReason, FencingError, WriteConflictError
from fencing.ops import Check, Create, Delete, Op, SetData


class ClaimError(FencingError):
    """A claim could not be taken or used; nothing was written."""


class ClaimHeldError(ClaimError):
    """Another worker's claim on the slot exists: wait until it is gone."""


class StaleAssignmentError(ClaimError):
    """The assignment changed (or vanished) since the worker read it: read it again."""


class ClaimLostError(ClaimError):
    """The claim is gone or someone claimed since: this worker may publish nothing more."""


@dataclass(frozen=True)
class ClaimToken:
    """Proof of a claim: the claim node and the epoch it was taken in."""

    claim_path: str
    epoch_path: str
    epoch: int  # version of ``epoch_path`` right after this claim bumped it

    def checks(self) -> list[Op]:
        """The two checks every commit under this claim begins with."""
        return [Check(self.epoch_path, self.epoch), Check(self.claim_path, 0)]


def take_claim(
    client: KazooClient,
    *,
    assignment_path: str,
    assignment_version: int,
    epoch_path: str,
    claim_path: str,
    record: bytes,
    timeout: float,
) -> ClaimToken:
    """Claim the slot in one multi-op; ``epoch_path`` must exist (a persistent folder).

    Raises ``StaleAssignmentError``, ``ClaimHeldError`` or ``WriteOutcomeUnknown`` (then
    read back: the claim node, if ours, carries this session as its ephemeral owner).
    """
    if assignment_version < 0:
        raise ValueError("a claim checks the assignment at the version it was read at")
    _require_connected(client, "claim")
    ops: list[Op] = [
        Check(assignment_path, assignment_version),
        SetData(epoch_path, record, -1),
        Create(claim_path, record, ephemeral=True),
    ]
    results = txn.commit(client, ops, timeout=timeout)
    failure = txn.first_failure(results)
    if failure is None:
        return ClaimToken(claim_path, epoch_path, int(results[1].version))
    index, error = failure
    if index == 0:
        raise StaleAssignmentError(
            f"{assignment_path} changed since it was read at version {assignment_version}"
        ) from error
    if index == 2 and txn.conflict_for(ops[2], error).reason is ConflictReason.EXISTS:
        raise ClaimHeldError(f"{claim_path} is held by another worker") from error
    raise txn.conflict_for(ops[index], error) from error


def commit_marker(
    client: KazooClient, token: ClaimToken, marker_path: str, record: bytes, *, timeout: float
) -> bool:
    """Create ``marker_path`` under the claim; False when the marker already existed.

    False still proves the claim: the checks passed before the create failed, so the
    batch was committed earlier (by this claim or a previous holder) and may be rolled
    forward. Raises ``ClaimLostError`` when the claim is gone or the epoch moved, and
    refuses without sending while the session is not connected (a request queued in a
    SUSPENDED client could be sent late).
    """
    _require_connected(client, "commit")
    ops: list[Op] = [*token.checks(), Create(marker_path, record)]
    results = txn.commit(client, ops, timeout=timeout)
    failure = txn.first_failure(results)
    if failure is None:
        return True
    index, error = failure
    if index < 2:
        raise ClaimLostError(
            f"claim {token.claim_path} (epoch {token.epoch}) is gone or superseded; "
            "nothing was committed"
        ) from error
    conflict = txn.conflict_for(ops[index], error)
    if conflict.reason is ConflictReason.EXISTS:
        return False
    raise conflict from error


def release_claim(
    client: KazooClient, token: ClaimToken, *, timeout: float, retire: Sequence[str] = ()
) -> bool:
    """Delete our claim node if it is still ours; True when deleted.

    ``retire`` (a killed topology's commit markers, then their folder) is deleted in the
    same multi-op, so only the last holder cleans up.
    """
    if client.state != KazooState.CONNECTED:
        return False  # the session closing (or expiring) removes it anyway
    ops: list[Op] = [
        Check(token.epoch_path, token.epoch),
        Delete(token.claim_path, 0),
        *(Delete(path) for path in retire),
    ]
    results = txn.commit(client, ops, timeout=timeout)
    return txn.first_failure(results) is None


def prune_markers(
    client: KazooClient, token: ClaimToken, markers: Sequence[str], *, timeout: float
) -> int:
    """Delete old commit markers in one multi-op under the claim; returns how many.

    A marker deleted meanwhile makes the multi-op fail as a conflict (nothing deleted);
    the next prune tries again.
    """
    if not markers:
        return 0
    _require_connected(client, "prune")
    ops: list[Op] = [*token.checks(), *(Delete(m) for m in markers)]
    results = txn.commit(client, ops, timeout=timeout)
    failure = txn.first_failure(results)
    if failure is None:
        return len(markers)
    index, error = failure
    if index < 2:
        raise ClaimLostError(f"claim {token.claim_path} is gone; nothing pruned") from error
    raise txn.conflict_for(ops[index], error) from error


def _require_connected(client: KazooClient, what: str) -> None:
    if client.state != KazooState.CONNECTED:
        raise ClaimLostError(
            f"not connected to ZooKeeper ({client.state}): the claim may be gone; no {what} sent"
        )


__all__ = [
    "ClaimError",
    "ClaimHeldError",
    "ClaimLostError",
    "ClaimToken",
    "StaleAssignmentError",
    "WriteConflictError",
    "commit_marker",
    "prune_markers",
    "release_claim",
    "take_claim",
]
