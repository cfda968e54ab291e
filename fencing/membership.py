"""A process's writes to its own nodes: membership, heartbeats and structural folders.

Not cluster state, so not behind the leader's lock node: every replica (leader or not)
registers itself under ``/nimbuses`` (ephemeral) and ``/code-distributor`` (persistent,
see ``Membership.hold``), and supervisors and
workers under their own paths. The API only touches paths whose last component is the
caller's own id (ephemeral membership) or ``<id>-<suffix>`` (persistent per-slot nodes such
as worker heartbeats), so it cannot be used to write someone else's state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from fencing import txn
from fencing.errors import (
    ConflictReason,
    MembershipError,
    WriteConflictError,
    WriteOutcomeUnknown,
)
from fencing.ops import Create, Delete, SetData


def ensure_folders(client: KazooClient, paths: Iterable[str]) -> None:
    """Create empty persistent folders (idempotent, safe to repeat on any session)."""
    for path in paths:
        client.ensure_path(path)


class Membership:
    """Ephemeral nodes owned by one process identity (``owner``, e.g. ``host:port``)."""

    def __init__(self, client: KazooClient, owner: str, *, timeout: float) -> None:
        if not owner or "/" in owner:
            raise ValueError(f"owner id must be a non-empty name without '/', got {owner!r}")
        self._client = client
        self.owner = owner
        self._timeout = timeout

    def owns(self, path: str) -> bool:
        return path.rstrip("/").rsplit("/", 1)[-1] == self.owner

    def register(self, path: str, data: bytes) -> None:
        """Create or take over the caller's own ephemeral node at ``path``.

        A node left by this identity's earlier session (a kill -9 and quick restart,
        the old session not yet expired) is replaced in one multi-op, as Kafka's
        ``checkedEphemeralCreate`` does, instead of failing with NodeExists.
        """
        self._require_own(path)
        parent = path.rsplit("/", 1)[0]
        if parent:
            self._client.ensure_path(parent)
        for _ in range(8):
            try:
                self._commit([Create(path, data, ephemeral=True)])
                return
            except WriteConflictError as e:
                if e.reason is not ConflictReason.EXISTS:
                    raise
            stat = self._client.exists(path)
            if stat is None:
                continue  # the old node just expired; create again
            if stat.ephemeralOwner == self._session_id():
                try:
                    self._commit([SetData(path, data, stat.version)])
                    return
                except WriteConflictError:
                    continue
            try:
                self._commit([Delete(path, stat.version), Create(path, data, ephemeral=True)])
                return
            except WriteConflictError:
                continue
        raise MembershipError(f"could not register {path}: it keeps changing under us")

    def update(self, path: str, data: bytes) -> None:
        """Replace the data of the caller's own node, registering it again if it is gone."""
        self._require_own(path)
        stat = self._client.exists(path)
        if stat is None or stat.ephemeralOwner != self._session_id():
            self.register(path, data)
            return
        try:
            self._commit([SetData(path, data, stat.version)])
        except WriteConflictError:
            self.register(path, data)

    def unregister(self, path: str) -> bool:
        """Delete the caller's own node if this session holds it; True when deleted."""
        self._require_own(path)
        stat = self._client.exists(path)
        if stat is None or stat.ephemeralOwner != self._session_id():
            return False
        try:
            self._commit([Delete(path, stat.version)])
        except WriteConflictError:
            return False
        return True

    # -- persistent own nodes ------------------------------------------------------------

    def hold(self, path: str, data: bytes) -> None:
        """Create or overwrite the caller's own *persistent* node named exactly ``owner``.

        For statements about the caller's disk (``/code-distributor/<id>/<owner>``: "I
        hold this package"): they stay true across sessions, so a session owns no node per
        topology, and closing or expiring it costs ZooKeeper nothing at 10,000 topologies
        (ephemeral holder nodes made the old leader's session close a 10,000-delete
        transaction that the new leader's first writes queued behind). Readers filter
        holders by live ``/nimbuses`` membership.
        """
        self._require_own(path)
        parent = path.rsplit("/", 1)[0]
        for _ in range(8):
            try:
                data_now, stat = self._client.get(path)
            except NoNodeError:
                try:
                    self._commit([Create(path, data)])
                    return
                except WriteConflictError as e:
                    if e.reason is not ConflictReason.NO_NODE or not parent:
                        continue
                # The folder is missing: create it and the node in one step, so nobody
                # sees the folder empty (to a code syncer an empty folder is a
                # submission with no holder yet, and nothing there to fetch).
                try:
                    self._commit([Create(parent), Create(path, data)])
                    return
                except WriteConflictError as e:
                    if e.reason is ConflictReason.NO_NODE:
                        self._client.ensure_path(parent.rsplit("/", 1)[0] or "/")
                    continue
            if data_now == data:
                return
            try:
                self._commit([SetData(path, data, stat.version)])
                return
            except WriteConflictError:
                continue
        raise MembershipError(f"could not write {path}: it keeps changing under us")

    def hold_many(self, nodes: Sequence[tuple[str, bytes]]) -> list[str]:
        """``hold`` for many nodes that do not exist yet, all creates in flight at once.

        A replica registering 10,000 packages after a restart sends 10,000 one-op
        transactions back to back instead of waiting for each; returns the paths that
        now exist (created, or found already there: the caller's own). Any other
        outcome is left for ``hold`` to retry one by one.
        """
        for path, _ in nodes:
            self._require_own(path)
        sent = []
        for path, data in nodes:
            # Its folder first (an empty structural node; "exists" is the usual answer):
            # ZooKeeper applies a session's requests in order, so it is there in time.
            txn.send(self._client, [Create(path.rsplit("/", 1)[0])])
            sent.append((path, txn.send(self._client, [Create(path, data)])))
        held: list[str] = []
        for path, result in sent:
            try:
                results = txn.wait(result, timeout=self._timeout)
            except WriteOutcomeUnknown:
                continue
            failure = txn.first_failure(results)
            if failure is None or isinstance(failure[1], NodeExistsError):
                held.append(path)
        return held

    def release(self, path: str) -> bool:
        """Delete the caller's own persistent node (see ``hold``); True when deleted."""
        self._require_own(path)
        return self._delete_if_present(path)

    # -- persistent own per-slot nodes (e.g. worker heartbeats) -----------------------

    def owns_prefixed(self, path: str) -> bool:
        """True for a node named ``<owner>-<suffix>`` (suffix without ``-``), e.g. ``sup1-0``.

        The suffix may not contain ``-``, so ``sup1-b-0`` belongs to ``sup1-b`` and never
        to ``sup1``: exactly one owner matches any name.
        """
        name = path.rstrip("/").rsplit("/", 1)[-1]
        prefix, sep, suffix = name.rpartition("-")
        return bool(sep) and bool(suffix) and prefix == self.owner

    def put(self, path: str, data: bytes) -> None:
        """Create or overwrite the caller's own persistent node ``<owner>-<suffix>``.

        Persistent, so it outlives a session: a heartbeat is judged by its content (the
        time in it), not by its existence. Its parent folder is made when missing.
        """
        self._require_own_prefixed(path)
        parent = path.rsplit("/", 1)[0]
        for _ in range(8):
            stat = self._client.exists(path)
            op: Create | SetData = (
                Create(path, data) if stat is None else SetData(path, data, stat.version)
            )
            try:
                self._commit([op])
                return
            except WriteConflictError as e:
                if e.reason is ConflictReason.NO_NODE and parent:
                    self._client.ensure_path(parent)  # the folder was cleaned up; make it again
        raise MembershipError(f"could not write {path}: it keeps changing under us")

    def remove(self, path: str) -> bool:
        """Delete the caller's own persistent node ``<owner>-<suffix>``; True when deleted."""
        self._require_own_prefixed(path)
        return self._delete_if_present(path)

    # -- this session's own ephemeral nodes, whatever their names --------------------------

    def drop_session_nodes(self, folder: str) -> list[str]:
        """Delete the ephemeral children of ``folder`` owned by this very session.

        For queue nodes named by a recipe (a lock's ``<uuid>__lock__<seq>``): one left
        behind by a release that failed on a dropped connection would sit ahead of this
        session's next contender, which would then wait on itself for ever. Each delete
        names the version it saw, so a node that changed hands is left alone.
        """
        session = self._session_id()
        try:
            names = self._client.get_children(folder)
        except NoNodeError:
            return []
        dropped: list[str] = []
        for name in names:
            path = f"{folder}/{name}"
            stat = self._client.exists(path)
            if stat is None or stat.ephemeralOwner != session:
                continue
            try:
                self._commit([Delete(path, stat.version)])
            except (WriteConflictError, WriteOutcomeUnknown):
                continue  # changed hands, or unknown: the caller's next round looks again
            dropped.append(name)
        return dropped

    def _delete_if_present(self, path: str) -> bool:
        try:
            self._commit([Delete(path)])
        except WriteConflictError as e:
            if e.reason is ConflictReason.NO_NODE:
                return False
            raise
        return True

    def _require_own_prefixed(self, path: str) -> None:
        if not self.owns_prefixed(path):
            raise MembershipError(
                f"{self.owner} may not write {path}: not one of its own {self.owner}-* nodes"
            )

    def _commit(self, ops: list[Create | SetData | Delete]) -> None:
        results = txn.commit(self._client, ops, timeout=self._timeout)
        failure = txn.first_failure(results)
        if failure is not None:
            index, error = failure
            raise txn.conflict_for(ops[index], error) from error

    def _session_id(self) -> int:
        """This client's session. kazoo reports none while disconnected: that is not
        "no node is ours" but "cannot tell yet", so it raises ``ConnectionLoss`` and the
        caller tries again once connected (a silent -1 would drop nothing, and a contender
        would then wait on its own leftover lock node)."""
        client_id = self._client.client_id
        if not client_id:
            raise ConnectionLoss("no session while disconnected")
        return int(client_id[0])

    def _require_own(self, path: str) -> None:
        if not self.owns(path):
            raise MembershipError(f"{self.owner} may not write {path}: not its own node")


def probe_write(client: KazooClient, *, timeout: float) -> None:
    """Prove the ensemble commits writes: create and delete a scratch node in one multi-op.

    Readiness of a ZooKeeper server means a write went through its quorum, not an open
    port; the scratch node is ephemeral and gone in the same transaction.
    """
    path = f"/.nimbus-probe-{uuid.uuid4().hex}"
    ops: list[Create | SetData | Delete] = [Create(path, b"", ephemeral=True), Delete(path)]
    results = txn.commit(client, ops, timeout=timeout)
    failure = txn.first_failure(results)
    if failure is not None:
        index, error = failure
        raise txn.conflict_for(ops[index], error) from error


__all__ = ["Membership", "ensure_folders", "probe_write"]
