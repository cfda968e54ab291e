"""The daemon's topology calls: submit (leader), list, describe, download and push (any replica)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
from kazoo.client import KazooClient

from cluster.api import pb, records
from cluster.apierror import ApiError
from cluster.names import check_digest_arg
from cluster.paths import Paths
from cluster.recordcache import RecordCache
from code_sync.errors import (
    PackageNotFound,
    PackageRejected,
    PushBusy,
    PushUnverifiable,
    StoreError,
)
from code_sync.push import PushReceiver
from code_sync.store import CodeStore
from fencing import MembershipError
from nimbus.config import NimbusConfig
from nimbus.duties.handover import Handover
from nimbus.duties.lifecycle import Lifecycle
from nimbus.duties.requests import OnDivergentServer
from nimbus.duties.submission import CurrentWriter, Submitter
from nimbus.server import topologies
from nimbus.server.security.limits import check_kill, check_rebalance, checked_submit, guarded

DOWNLOAD_CHUNK = 1024 * 1024


class DaemonTopologyApi:
    """``reads`` is the bulk-read session, not the election one: ZooKeeper answers one
    session's requests in order, so a read on the election session waits behind the beats
    in flight, which a slow disk holds for seconds each (a ``list`` of a few topologies
    then outlived the CLI's deadline)."""

    def __init__(
        self,
        reads: KazooClient,
        paths: Paths,
        store: CodeStore,
        submitter: Submitter,
        lifecycle: Lifecycle,
        *,
        receiver: PushReceiver | None = None,
        handover: Handover | None = None,
    ) -> None:
        self._reads = reads
        self._receiver = receiver
        self._handover = handover
        self.kill = guarded(check_kill, lifecycle.kill)  # bounds first (nimbus/server/security)
        self.activate = lifecycle.activate
        self.deactivate = lifecycle.deactivate
        self.rebalance = guarded(check_rebalance, lifecycle.rebalance)
        self._paths = paths
        self._store = store
        self._submitter = submitter

    def submit(self, requests: Iterator[pb.SubmitTopologyRequest]) -> pb.SubmitTopologyResponse:
        return self._submitter.submit(checked_submit(requests))

    def handover(self, request: pb.HandoverRequest) -> pb.HandoverResponse:
        if self._handover is None:
            raise ApiError(grpc.StatusCode.UNIMPLEMENTED, "Handover is not served by this server")
        return self._handover.handover(request)

    def list_topologies(self) -> pb.ListTopologiesResponse:
        return topologies.list_topologies(self._reads, self._paths)

    def describe(self, name: str) -> pb.TopologyDetail:
        return topologies.describe(self._reads, self._paths, name)

    def list_supervisors(self) -> list[records.SupervisorInfo]:
        return topologies.list_supervisors(self._reads, self._paths)

    def download(self, digest: str, offset: int) -> Iterator[pb.CodeChunk]:
        check_digest_arg(digest)
        if offset < 0:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"negative offset {offset}")
        if not self._store.has(digest):
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"this replica holds no package {digest}")
        try:
            total = self._store.size(digest)
        except PackageNotFound as e:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"package {digest} is gone: {e}") from e
        return self._stream(digest, offset, total)

    def _stream(self, digest: str, offset: int, total: int) -> Iterator[pb.CodeChunk]:
        position = offset
        try:
            for data in self._store.read_chunks(digest, chunk_size=DOWNLOAD_CHUNK, offset=offset):
                yield pb.CodeChunk(data=data, offset=position, total_size=total, digest=digest)
                position += len(data)
        except PackageNotFound as e:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"package {digest} is gone: {e}") from e
        except StoreError as e:
            raise ApiError(grpc.StatusCode.DATA_LOSS, f"package {digest} is damaged: {e}") from e

    def push(self, requests: Iterator[pb.PushCodeRequest]) -> pb.PushCodeResponse:
        """A package the leader sends us (``code_sync.push``), its refusals as statuses."""
        if self._receiver is None:
            raise ApiError(grpc.StatusCode.UNIMPLEMENTED, "PushCode is not served by this server")
        try:
            return self._receiver.accept(requests)
        except PackageRejected as e:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"push refused: {e}") from e
        except PushUnverifiable as e:
            raise ApiError(grpc.StatusCode.FAILED_PRECONDITION, f"push refused: {e}") from e
        except PushBusy as e:
            raise ApiError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)) from e
        except StoreError as e:
            raise ApiError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"cannot store: {e}") from e
        except MembershipError as e:
            raise ApiError(
                grpc.StatusCode.UNAVAILABLE, f"stored, but could not register: {e}"
            ) from e
        except grpc.RpcError as e:  # the sender's stream ended under us (it cancelled)
            raise ApiError(grpc.StatusCode.CANCELLED, "the sender ended the push") from e


def make_topology_api(
    client: KazooClient,
    reads: KazooClient,
    config: NimbusConfig,
    store: CodeStore,
    storms: RecordCache[records.StormBase],
    *,
    current_writer: CurrentWriter,
    on_divergent_server: OnDivergentServer,
    receiver: PushReceiver,
    zk_latency: Callable[[], float],
) -> DaemonTopologyApi:
    """The leader's duties behind the topology calls, as a replica wires them: writes on
    the election session, reads on ``reads``, a divergent server left."""
    submitter = Submitter(
        client, config, store, current_writer=current_writer,
        on_divergent_server=on_divergent_server, zk_latency=zk_latency,
    )  # fmt: skip
    storms.add_record_listener(submitter.learn)  # verdicts of topologies seen
    lifecycle = Lifecycle(
        client, config.paths, current_writer=current_writer,
        on_divergent_server=on_divergent_server,
    )  # fmt: skip
    handover = Handover(
        client, config.paths, config.replica_id, current_writer=current_writer,
        new_term_wait=max(30.0, 3 * config.session_timeout),
        on_divergent_server=on_divergent_server,
    )  # fmt: skip
    return DaemonTopologyApi(
        reads, config.paths, store, submitter, lifecycle, receiver=receiver, handover=handover
    )
