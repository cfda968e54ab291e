"""ZooKeeper paths of the layout in DESIGN.md, in one place (Storm's ``cluster.clj``).

No other module builds a layout path from a string: it asks a ``Paths`` object, which every
collaborator takes instead of a root string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

#: A cluster's root: an absolute ZooKeeper path of plain segments, like ``/storm``.
ROOT_RE = re.compile(r"(/[A-Za-z0-9._-]+)+")


def valid_root(root: str) -> bool:
    return ROOT_RE.fullmatch(root) is not None


class QueuedLock(Protocol):
    """What ``Paths.lock_node_of`` reads of a kazoo ``Lock``: its folder and the name of
    its node in that folder (None while it has none)."""

    path: str
    node: str | None


@dataclass(frozen=True)
class Paths:
    root: str

    @property
    def leader_lock(self) -> str:
        return f"{self.root}/leader-lock"

    def lock_node(self, name: str) -> str:
        """One node of the lock queue, by its name as listed."""
        return f"{self.leader_lock}/{name}"

    def lock_node_of(self, lock: QueuedLock) -> str | None:
        """The full path of a queued lock's node; None while it has none. A lock of another
        folder is a wiring mistake: ``ValueError``."""
        if lock.path != self.leader_lock:
            raise ValueError(f"a lock on {lock.path}, not on the lock queue {self.leader_lock}")
        node = lock.node  # read once: another thread may be leaving the queue
        return self.lock_node(node) if node else None

    def is_lock_node(self, path: str) -> bool:
        """Whether ``path`` names one node of the lock queue (a child of ``leader_lock``)."""
        folder, _, name = path.rpartition("/")
        return folder == self.leader_lock and bool(name)

    @property
    def leader_epoch(self) -> str:
        return f"{self.root}/leader-epoch"

    @property
    def beats(self) -> str:
        """Each queued replica's beat node, named after its lock node (DESIGN item 8)."""
        return f"{self.root}/beats"

    def beat(self, lock_node: str) -> str:
        """The beat node of a lock node (its full path or its name)."""
        return f"{self.beats}/{lock_node.rsplit('/', 1)[-1]}"

    @property
    def epochs(self) -> str:
        return f"{self.root}/epochs"

    def epoch(self, epoch: int) -> str:
        """One term's ``EpochRecord``; the node name is the epoch number."""
        return f"{self.epochs}/{epoch}"

    @property
    def nimbuses(self) -> str:
        return f"{self.root}/nimbuses"

    @property
    def storms(self) -> str:
        return f"{self.root}/storms"

    @property
    def code_distributor(self) -> str:
        return f"{self.root}/code-distributor"

    @property
    def names(self) -> str:
        return f"{self.root}/names"

    @property
    def errors(self) -> str:
        return f"{self.root}/errors"

    def errors_of(self, topology_id: str) -> str:
        """A topology's errors: one folder per component, ``ErrorInfo`` sequence nodes."""
        return f"{self.errors}/{topology_id}"

    def component_errors(self, topology_id: str, component: str) -> str:
        return f"{self.errors}/{topology_id}/{component}"

    def component_error(self, topology_id: str, component: str, name: str) -> str:
        """One error node (``name`` as listed), or with ``name="e"`` the sequence prefix."""
        return f"{self.errors}/{topology_id}/{component}/{name}"

    @property
    def credentials(self) -> str:
        return f"{self.root}/credentials"

    def credential(self, topology_id: str) -> str:
        """A topology's secret: readable by the service and that topology's identity only."""
        return f"{self.credentials}/{topology_id}"

    @property
    def supervisors(self) -> str:
        return f"{self.root}/supervisors"

    @property
    def assignments(self) -> str:
        return f"{self.root}/assignments"

    @property
    def workerbeats(self) -> str:
        return f"{self.root}/workerbeats"

    @property
    def requests(self) -> str:
        return f"{self.root}/requests"

    def request(self, request_id: str) -> str:
        return f"{self.requests}/{request_id}"

    @property
    def confirmations(self) -> str:
        """A retried request's outcome, written again in a transaction of the leader's own
        (``nimbus.duties.confirm``): outside ``/requests``, so it outlives a record that
        was a ZooKeeper ghost."""
        return f"{self.root}/confirmed"

    def confirmation(self, request_id: str) -> str:
        return f"{self.confirmations}/{request_id}"

    @property
    def handover(self) -> str:
        """A planned handover: whom the leader of a term handed it to (``records.Handover``)."""
        return f"{self.root}/handover"

    def storm(self, topology_id: str) -> str:
        return f"{self.storms}/{topology_id}"

    def name(self, name: str) -> str:
        return f"{self.names}/{name}"

    def code_holders(self, topology_id: str) -> str:
        return f"{self.code_distributor}/{topology_id}"

    def code_holder(self, topology_id: str, replica_id: str) -> str:
        return f"{self.code_distributor}/{topology_id}/{replica_id}"

    def nimbus(self, replica_id: str) -> str:
        return f"{self.nimbuses}/{replica_id}"

    def supervisor(self, supervisor_id: str) -> str:
        return f"{self.supervisors}/{supervisor_id}"

    def assignment(self, topology_id: str) -> str:
        return f"{self.assignments}/{topology_id}"

    def workerbeats_of(self, topology_id: str) -> str:
        return f"{self.workerbeats}/{topology_id}"

    def workerbeat(self, topology_id: str, name: str) -> str:
        """``name`` is ``<supervisor-id>-<slot>`` (see ``worker_name``)."""
        return f"{self.workerbeats}/{topology_id}/{name}"

    @property
    def claims(self) -> str:
        return f"{self.root}/claims"

    def claims_of(self, topology_id: str) -> str:
        """Persistent; its znode version is the topology's claim epoch."""
        return f"{self.claims}/{topology_id}"

    def claim(self, topology_id: str, index: int) -> str:
        """Ephemeral claim on slot ``index`` of the topology's ``Assignment.slots``."""
        return f"{self.claims}/{topology_id}/{index}"

    @property
    def commits(self) -> str:
        return f"{self.root}/commits"

    def commits_of(self, topology_id: str) -> str:
        return f"{self.commits}/{topology_id}"

    def commit(self, topology_id: str, sink: str, batch_id: int) -> str:
        """Commit marker of one micro-batch of one sink: ``<sink>-<batch id, 12 digits>``."""
        return f"{self.commits}/{topology_id}/{sink}-{batch_id:012d}"

    def folders(self) -> list[str]:
        """Structural folders every replica makes sure exist at start."""
        return [
            self.leader_lock,
            self.beats,
            self.epochs,
            self.nimbuses,
            self.storms,
            self.code_distributor,
            self.names,
            self.errors,
            self.requests,
            self.confirmations,
            self.supervisors,
            self.assignments,
            self.workerbeats,
        ]


def worker_name(supervisor_id: str, slot: int) -> str:
    """A worker's heartbeat node name, ``<supervisor-id>-<slot>`` (DESIGN's node-port)."""
    return f"{supervisor_id}-{slot}"


def parse_worker_name(name: str) -> tuple[str, int] | None:
    """``(supervisor_id, slot)`` from a heartbeat node name; None when it is not one.

    The slot is the part after the last ``-``, so supervisor ids may contain ``-``.
    """
    supervisor_id, sep, slot = name.rpartition("-")
    if not sep or not supervisor_id or not slot.isdigit():
        return None
    return supervisor_id, int(slot)
