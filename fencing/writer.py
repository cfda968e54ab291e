"""The fenced writer: the only path by which cluster state changes in ZooKeeper.

Every call is one multi-op whose first operation checks the leader's own lock node.
If that node is gone the whole transaction aborts on the server, so a replica that was
paused, partitioned or deposed between deciding to write and writing cannot change
anything, not even by a request kazoo queued and sent on a later session. A separate
``exists`` followed by a write would leave exactly that window open.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError, SessionExpiredError

from fencing import txn
from fencing.errors import (
    LeaseLapsedError,
    NotLeaderError,
    VersionConflictError,
    WriteConflictError,
    WriteOutcomeUnknown,
)
from fencing.ops import Check, Create, Delete, Op, SetData
from fencing.token import CancelReason, LeadershipToken

R = TypeVar("R")
LeaderHint = Callable[[], str | None]
#: Told each multi-op's outcome: "ok", "not_leader", "conflict" or "unknown".
WriteObserver = Callable[[str], None]


def stamp_epoch(record: Any, epoch: int) -> None:
    """Set ``record.epoch`` when the record type has that field: every record says who wrote it."""
    descriptor = getattr(record, "DESCRIPTOR", None)
    if descriptor is not None and "epoch" in descriptor.fields_by_name:
        record.epoch = epoch


class FencedWriter:
    """Writes cluster state under one leadership token.

    ``leader_hint`` names the current leader for error messages (from the discovery
    cache). ``lease_valid`` (see ``fencing.lease``) makes a replica that woke from a pause
    refuse before kazoo has noticed. ``timeout`` bounds each round trip; past it the
    outcome is unknown. ``observer`` (settable later) is told each write's outcome, so the
    daemon can count them without this package depending on a metrics library.
    """

    def __init__(
        self,
        client: KazooClient,
        token: LeadershipToken,
        *,
        timeout: float,
        leader_hint: LeaderHint | None = None,
        lease_valid: Callable[[], bool] | None = None,
        observer: WriteObserver | None = None,
    ) -> None:
        self.observer = observer
        self._client = client
        self._lease_valid = lease_valid
        self.token = token
        self._check = Check(token.lock_node, -1)  # first op of every multi, made once
        self._timeout = timeout
        self._leader_hint = leader_hint

    # -- single operations ------------------------------------------------------------

    def create(self, path: str, data: bytes = b"", *, sequence: bool = False) -> str:
        """Create a persistent node; returns the created path (with its sequence suffix)."""
        result: str = self.batch([Create(path, data, sequence=sequence)])[0]
        return result

    def set(self, path: str, data: bytes, *, version: int = -1) -> Any:
        """Set a node's data; with ``version`` >= 0 it is a compare-and-set."""
        return self.batch([SetData(path, data, version)])[0]

    def delete(self, path: str, *, version: int = -1) -> None:
        self.batch([Delete(path, version)])

    def delete_recursive(self, path: str) -> int:
        """Delete ``path`` and everything under it in one multi-op; returns nodes deleted.

        The tree is read first; if it changes before the commit the multi-op fails
        as a conflict and nothing is deleted. A missing ``path`` deletes nothing.
        """
        self._refuse_if_cancelled()
        ops: list[Op] = []
        try:
            self._collect_deletes(path, ops)
        except NoNodeError:
            if not ops:
                return 0
        if not ops:
            return 0
        self.batch(ops)
        return len(ops)

    # -- records ------------------------------------------------------------------------

    def create_record(self, path: str, record: Any, *, unchanged: Sequence[Check] = ()) -> str:
        """Create a node holding ``record``, stamped with this term's epoch. ``unchanged``:
        nodes that must still be at the versions the decision was made on (same multi-op)."""
        stamp_epoch(record, self.token.epoch)
        data = record.SerializeToString(deterministic=True)
        result: str = self.batch([*unchanged, Create(path, data)])[len(unchanged)]
        return result

    def set_record(
        self, path: str, record: Any, *, version: int, unchanged: Sequence[Check] = ()
    ) -> Any:
        """Compare-and-set ``record`` at ``version`` (the version it was read at);
        ``unchanged`` as in ``create_record``."""
        if version < 0:
            raise ValueError("set_record is a compare-and-set: pass the version it was read at")
        stamp_epoch(record, self.token.epoch)
        data = record.SerializeToString(deterministic=True)
        return self.batch([*unchanged, SetData(path, data, version)])[len(unchanged)]

    def update_record(
        self,
        path: str,
        parse: Callable[[bytes], R],
        mutate: Callable[[R], None],
        *,
        attempts: int = 32,
    ) -> R:
        """Read-modify-write with compare-and-set, re-reading on a lost race.

        Retrying after ``VersionConflictError`` is safe: the failed multi-op wrote
        nothing. Concurrent updates therefore never lose each other.
        """
        last: VersionConflictError | None = None
        for _ in range(attempts):
            self._refuse_if_cancelled()
            data, stat = self._client.get(path)
            record = parse(data)
            mutate(record)
            try:
                self.set_record(path, record, version=stat.version)
            except VersionConflictError as e:
                last = e
                continue
            return record
        assert last is not None
        raise last

    # -- the one sender -----------------------------------------------------------------

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        """Apply ``ops`` atomically behind the lock-node check; returns one result per op."""
        try:
            results = self._send(ops)
        except NotLeaderError:
            self._observe("not_leader")
            raise
        except WriteConflictError:
            self._observe("conflict")
            raise
        except WriteOutcomeUnknown:
            self._observe("unknown")
            raise
        self._observe("ok")
        return results

    def _send(self, ops: Sequence[Op]) -> list[Any]:
        """The multi-op itself; ``batch`` reports its outcome to the observer."""
        self._refuse_if_cancelled()
        if self._client.state != KazooState.CONNECTED:
            # SUSPENDED means the session may already be gone: treat as deposed.
            raise NotLeaderError(
                f"not connected to ZooKeeper ({self._client.state})", leader=self._hint()
            )
        fenced: list[Op] = [self._check, *ops]
        try:
            results = txn.commit(self._client, fenced, timeout=self._timeout)
        except WriteOutcomeUnknown as e:
            if isinstance(e.__cause__, SessionExpiredError):
                self.token.cancel(CancelReason.WRITE_REFUSED, "session expired during a write")
            raise
        failure = txn.first_failure(results)
        if failure is None:
            return results[1:]
        index, error = failure
        if index == 0:
            reason = f"own lock node {self.token.lock_node} is gone"
            self.token.cancel(CancelReason.WRITE_REFUSED, reason)
            raise NotLeaderError(
                f"not the leader: {reason}; nothing was written", leader=self._hint()
            ) from error
        raise txn.conflict_for(fenced[index], error) from error

    # -- helpers ------------------------------------------------------------------------

    def _refuse_if_cancelled(self) -> None:
        if self._lease_valid is not None and not self._lease_valid():
            # Woken from a pause: do not act on stale belief before kazoo notices.
            raise LeaseLapsedError(
                "leader lease expired: no recent word from ZooKeeper; nothing was written",
                leader=self._hint(),
            )
        if self.token.cancelled:
            raise NotLeaderError(
                f"leadership of epoch {self.token.epoch} ended ({self.token.why}); "
                "nothing was written",
                leader=self._hint(),
            )

    def _observe(self, result: str) -> None:
        observer = self.observer
        if observer is not None:
            observer(result)

    def _hint(self) -> str | None:
        return self._leader_hint() if self._leader_hint else None

    def _collect_deletes(self, path: str, ops: list[Op]) -> None:
        for child in self._client.get_children(path):
            try:
                self._collect_deletes(f"{path.rstrip('/')}/{child}", ops)
            except NoNodeError:
                continue  # vanished while reading; the multi-op decides
        ops.append(Delete(path, -1))
