"""A planned handover (``nimbus handover``): the leader hands its term to a queued replica.

The leader checks the target (known, queued, holding the code of every live topology, not
itself), then writes ``/handover`` (``records.Handover``: the target and the term handed
over) with the request record in one fenced multi-op, and only then ends its own term
(``CancelReason.HANDOVER``): it leaves the lock at once and queues again, behind the
others. The replica next in the queue wins; one that is not the target and finds the term
that just ended handed to another steps aside, once per handover (``step_aside``), so
the target takes office after the replicas in front of it have requeued. The call answers
once a new term began, with its leader and epoch; a retry with the same request id gets
that answer (``nimbus.duties.confirm``), from whichever replica leads then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import WatchedEvent

from cluster.api import pb, records
from cluster.apierror import ApiError
from cluster.names import check_request_id
from cluster.paths import Paths
from cluster.reads import read_storms
from fencing import CancelReason, Create, Delete, FencedWriter, NotLeaderError, Op
from fencing.office import leader_epoch_of, read_leader_epoch
from leader.discovery import lock_sequence
from nimbus.duties.confirm import UnconfirmedError, recall_committed
from nimbus.duties.requests import OnDivergentServer, remember

CurrentWriter = Callable[[], FencedWriter | None]


def lock_queue(client: KazooClient, paths: Paths) -> list[tuple[str, str]]:
    """The lock queue in order: (lock node path, replica id) of each queued replica. The
    nodes' reads go out together: one round trip, not one a replica."""
    try:
        names = client.get_children(paths.leader_lock)
    except NoNodeError:
        return []
    sent = [(paths.lock_node(n), client.get_async(paths.lock_node(n))) for n in names]
    queue = []
    for path, read in sorted(sent, key=lambda item: lock_sequence(item[0])):
        try:
            queue.append((path, read.get()[0].decode()))
        except (NoNodeError, UnicodeDecodeError):
            continue  # left the queue meanwhile
    return queue


def lacking_code(client: KazooClient, paths: Paths, replica_id: str) -> list[str]:
    """Names of the live topologies whose code ``replica_id`` has not registered (the
    holder stats go out together)."""
    live = {
        tid: base
        for tid, base in read_storms(client, paths).items()
        if base.status not in (records.KILLED, records.CODE_MISSING)
    }
    sent = {tid: client.exists_async(paths.code_holder(tid, replica_id)) for tid in live}
    return sorted(live[tid].name for tid, held in sent.items() if held.get() is None)


class Handover:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        *,
        current_writer: CurrentWriter,
        new_term_wait: float,
        on_divergent_server: OnDivergentServer | None = None,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._client = client
        self._paths = paths
        self._id = replica_id
        self._current_writer = current_writer
        self._wait = new_term_wait
        self._on_divergent = on_divergent_server
        self._wall_ms = wall_ms

    def handover(self, request: pb.HandoverRequest) -> pb.HandoverResponse:
        writer = self._current_writer()
        if writer is None or writer.token.cancelled:
            raise NotLeaderError("this replica is not the leader")
        check_request_id(request.client_request_id)
        try:
            first = recall_committed(
                self._client, self._paths, writer, request.client_request_id,
                on_divergent=self._on_divergent,
            )  # fmt: skip
        except UnconfirmedError as e:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, str(e)) from e
        if first is not None:  # handed over before: the term that followed it
            return self._next_term(first.epoch)
        epoch = writer.token.epoch
        target = self._target(request.to, writer.token.lock_node)
        handover = records.Handover(
            to=target, epoch=epoch, request_id=request.client_request_id, time_ms=self._wall_ms()
        )
        ops: list[Op] = []
        stat = self._client.exists(self._paths.handover)
        if stat is not None:  # an earlier handover's: its term is over
            ops.append(Delete(self._paths.handover, int(stat.version)))
        ops.append(Create(self._paths.handover, handover.SerializeToString(deterministic=True)))
        ops += remember(
            self._paths, request.client_request_id, method="Handover", topology_id="",
            epoch=epoch, handover_to=target,
        )  # fmt: skip
        writer.batch(ops)
        writer.token.cancel(CancelReason.HANDOVER, f"handed over to {target}")
        return self._next_term(epoch)

    def _target(self, to: str, own_node: str) -> str:
        """The replica to hand over to, checked; ``ApiError`` naming why it cannot be."""
        if to == self._id:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"{to} is the leader itself")
        queue = lock_queue(self._client, self._paths)
        behind = [rid for node, rid in queue if node != own_node and rid != self._id]
        if not to:
            if not behind:
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION, "no other replica is queued to lead"
                )
            to = behind[0]
        elif self._client.exists(self._paths.nimbus(to)) is None:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"no replica {to} is registered")
        elif to not in behind:
            raise ApiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{to} is not queued for leadership (it waits for code, or just started)",
            )
        missing = lacking_code(self._client, self._paths, to)
        if missing:
            raise ApiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{to} lacks the code of {', '.join(missing)}; it could not take office",
            )
        return to

    def _next_term(self, handed: int) -> pb.HandoverResponse:
        """The leader and epoch of the first term after ``handed``, once it began."""
        changed = threading.Event()
        deadline = time.monotonic() + self._wait

        def watch(_event: WatchedEvent) -> None:
            changed.set()

        while True:
            changed.clear()
            self._client.exists(self._paths.leader_epoch, watch=watch)
            current, _ = read_leader_epoch(self._client, self._paths)
            if current is not None and current.epoch > handed:
                return self._term(handed + 1, current)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApiError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"term {handed} was handed over, but no new term began within "
                    f"{self._wait:g}s; `nimbus leader` shows when one does",
                )
            changed.wait(min(left, 1.0))

    def _term(self, epoch: int, current: records.LeaderEpoch) -> pb.HandoverResponse:
        """The term ``epoch``'s holder (from ``/epochs/<n>``; the current one as a fallback)."""
        try:
            record = records.EpochRecord.FromString(self._client.get(self._paths.epoch(epoch))[0])
            return pb.HandoverResponse(address=record.holder, epoch=epoch)
        except (NoNodeError, DecodeError):
            return pb.HandoverResponse(address=current.holder, epoch=current.epoch)


def read_handover(client: KazooClient, paths: Paths) -> tuple[records.Handover, int] | None:
    """``/handover`` and its czxid (which handover it is), or None."""
    return handover_of(client.get_async(paths.handover))


def handover_of(result: IAsyncResult) -> tuple[records.Handover, int] | None:
    """``read_handover`` from a read already sent (``get_async``)."""
    try:
        data, stat = result.get()
        return records.Handover.FromString(data), int(stat.czxid)
    except (NoNodeError, DecodeError):
        return None


class StepAside:
    """The winner's side: step aside for a handover to another replica, once per handover.

    Asked by the elector after winning the lock, before taking office: a reason to leave
    the lock and queue again, or None. Stepping aside only once per handover (by its
    czxid) keeps a handover to a replica that died meanwhile from stopping every election.
    """

    def __init__(self, client: KazooClient, paths: Paths, replica_id: str) -> None:
        self._client = client
        self._paths = paths
        self._id = replica_id
        self._done: set[int] = set()

    def __call__(self) -> str | None:
        return self.given(
            self._client.get_async(self._paths.handover),
            self._client.get_async(self._paths.leader_epoch),
        )

    def given(self, handover: IAsyncResult, leader_epoch: IAsyncResult) -> str | None:
        """The same, from reads of ``/handover`` and ``/leader-epoch`` already sent (the
        elector sends them behind the lock's listing)."""
        found = handover_of(handover)
        if found is None:
            return None
        handover_record, which = found
        if handover_record.to == self._id or which in self._done:
            return None
        current, _ = leader_epoch_of(leader_epoch)
        if current is None or current.epoch != handover_record.epoch:
            return None  # a handover of an older term: over
        self._done.add(which)
        return f"term {handover_record.epoch} was handed over to {handover_record.to}"
