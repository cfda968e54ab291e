"""Preempting a dead leader: the successor deletes its lock node, fenced on the term.

One multi-op: ``check(/leader-epoch, the version read)`` + ``delete(the leader's lock
node)``. The check makes the delete land only if the term the evidence was gathered
about is still the current one: a leader that changed meanwhile is never preempted.

Why this is safe even when the evidence is wrong (the leader was alive): every write of
cluster state checks the writer's own lock node in the same multi-op, so once the node
is gone no write of the old leader can land; it learns of the delete from its watch on
that node and steps down. A wrong preemption costs one needless failover, never safety.
It is the only write a follower makes to another process's node.
"""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.paths import Paths
from fencing import txn
from fencing.ops import Check, Delete, Op


def preempt(
    client: KazooClient, paths: Paths, *, lock_node: str, epoch_version: int, timeout: float
) -> bool:
    """Delete ``lock_node`` if ``/leader-epoch`` is still at ``epoch_version``.

    True when deleted; False when the term changed or the node is already gone (nothing
    written). ``WriteOutcomeUnknown`` when the connection dropped with it in flight.
    """
    if not lock_node.startswith(paths.leader_lock + "/"):
        raise ValueError(f"{lock_node} is not a node of the lock queue {paths.leader_lock}")
    ops: list[Op] = [Check(paths.leader_epoch, epoch_version), Delete(lock_node)]
    return txn.first_failure(txn.commit(client, ops, timeout=timeout)) is None
