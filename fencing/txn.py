"""Send one multi-op and classify its per-operation results.

Shared by the fenced writer, the take-office step and the membership API, so every
write in the project is sent, timed out and classified the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from fencing.errors import VersionConflictError, WriteConflictError, WriteOutcomeUnknown
from fencing.ops import Check, Create, Op, SetData

_UNKNOWN_OUTCOME = (
    ConnectionLoss,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
)


def commit(client: KazooClient, ops: Sequence[Op], *, timeout: float) -> list[Any]:
    """Send ``ops`` as one transaction and return kazoo's per-operation results.

    Never retried: a connection loss or timeout raises ``WriteOutcomeUnknown`` because
    the request may have reached the server.
    """
    if not ops:
        raise ValueError("a transaction needs at least one operation")
    txn = client.transaction()
    for op in ops:
        if isinstance(op, Check):
            txn.check(op.path, op.version)
        elif isinstance(op, Create):
            acl = list(op.acl) if op.acl is not None else None
            txn.create(op.path, op.data, acl=acl, ephemeral=op.ephemeral, sequence=op.sequence)
        elif isinstance(op, SetData):
            txn.set_data(op.path, op.data, op.version)
        else:
            txn.delete(op.path, op.version)
    try:
        results: list[Any] = txn.commit_async().get(timeout=timeout)
    except ConnectionClosedError as e:
        # The client was closed before sending: nothing went out.
        raise WriteOutcomeUnknown(f"ZooKeeper client closed during write: {e!r}") from e
    except _UNKNOWN_OUTCOME as e:
        raise WriteOutcomeUnknown(
            f"connection to ZooKeeper lost with a write in flight ({type(e).__name__}); "
            "its outcome is unknown, read back to learn it"
        ) from e
    return results


def first_failure(results: Sequence[Any]) -> tuple[int, Exception] | None:
    """The index and error of the operation that aborted the transaction, if any.

    ZooKeeper marks the other operations of an aborted multi as rolled back or
    inconsistent; only the real cause matters.
    """
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(
            result, RolledBackError | RuntimeInconsistency
        ):
            return index, result
    return None


def conflict_for(op: Op, error: Exception) -> WriteConflictError:
    """The project's exception for a failed target operation, cause kept by the caller."""
    if isinstance(error, BadVersionError):
        version = getattr(op, "version", -1)
        return VersionConflictError(
            f"{op.path} changed since it was read (expected version {version})",
            path=op.path,
            reason="bad-version",
        )
    if isinstance(error, NodeExistsError):
        return WriteConflictError(f"{op.path} already exists", path=op.path, reason="exists")
    if isinstance(error, NoNodeError):
        return WriteConflictError(
            f"{op.path} (or its parent) does not exist", path=op.path, reason="no-node"
        )
    if isinstance(error, NotEmptyError):
        return WriteConflictError(
            f"{op.path} has children and cannot be deleted", path=op.path, reason="not-empty"
        )
    return WriteConflictError(
        f"{type(op).__name__} of {op.path} failed: {type(error).__name__}",
        path=op.path,
        reason=type(error).__name__,
    )
