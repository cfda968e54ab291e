"""The gRPC face of leadership: discovery answers from memory, redirects from followers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import NoReturn, Protocol, TypeVar

import grpc

from cluster.api import pb, records, rpc
from cluster.apierror import ApiError
from fencing import NotLeaderError
from leader.discovery import LeaderCache, LeaderInfo
from leader.elector import Elector
from nimbus.call_metadata import LEADER_EPOCH_METADATA_KEY, LEADER_METADATA_KEY
from nimbus.server.forward import Call, Forwarder, wants_forwarding

T = TypeVar("T")


class TopologyApi(Protocol):
    """What the daemon provides for topology calls; errors are ``ApiError``."""

    def submit(self, requests: Iterator[pb.SubmitTopologyRequest]) -> pb.SubmitTopologyResponse: ...

    def kill(self, request: pb.KillTopologyRequest) -> pb.TopologyActionResponse: ...

    def activate(self, request: pb.TopologyNameRequest) -> pb.TopologyActionResponse: ...

    def deactivate(self, request: pb.TopologyNameRequest) -> pb.TopologyActionResponse: ...

    def rebalance(self, request: pb.RebalanceTopologyRequest) -> pb.TopologyActionResponse: ...

    def handover(self, request: pb.HandoverRequest) -> pb.HandoverResponse: ...

    def list_topologies(self) -> pb.ListTopologiesResponse: ...

    def describe(self, name: str) -> pb.TopologyDetail: ...

    def list_supervisors(self) -> list[records.SupervisorInfo]: ...

    def download(self, digest: str, offset: int) -> Iterator[pb.CodeChunk]: ...

    def push(self, requests: Iterator[pb.PushCodeRequest]) -> pb.PushCodeResponse: ...


class NimbusServicer(rpc.NimbusServicer):
    """Serves discovery on every replica; leader-only calls only on the leader.

    A replica whose lease ran out (no recent word from ZooKeeper) does not trust its
    cache and answers ``UNAVAILABLE``, so clients ask another seed.
    """

    def __init__(
        self,
        *,
        replica_id: str,
        elector: Elector,
        cache: LeaderCache,
        api: TopologyApi | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self._id = replica_id
        self._elector = elector
        self._cache = cache
        self._api = api
        self._forwarder = forwarder

    # -- discovery (every replica) ------------------------------------------------------

    def GetLeaderAddress(
        self, request: pb.GetLeaderAddressRequest, context: grpc.ServicerContext
    ) -> pb.GetLeaderAddressResponse:
        self._require_fresh(context)
        own = self._own_term()
        am_leader = own is not None
        # The leader answers from its own term: its cache learns the record it just wrote
        # a read later, behind whatever the term's first writes queued (3 fsyncs' wait
        # when ZooKeeper's disk is slow: clients would be told "no leader" meanwhile).
        leader = own if own is not None else self._cache.leader()
        if leader is not None and leader.address == self._id and not am_leader:
            leader = None  # our own stale term: never claim it
        if leader is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "no leader is known right now")
        return pb.GetLeaderAddressResponse(
            host=leader.host,
            port=leader.port,
            replica_id=leader.address,
            epoch=leader.epoch,
            responder=self._id,
            responder_is_leader=am_leader,
        )

    def GetAllNimbusAddresses(
        self, request: pb.GetAllNimbusAddressesRequest, context: grpc.ServicerContext
    ) -> pb.GetAllNimbusAddressesResponse:
        self._require_fresh(context)
        leader = self._cache.leader()
        return pb.GetAllNimbusAddressesResponse(
            leader_epoch=leader.epoch if leader else 0, nimbuses=self._nimbus_infos()
        )

    def _own_term(self) -> LeaderInfo | None:
        """Ourselves, while we lead with a valid claim (the elector's word, not the cache's)."""
        token = self._elector.token
        if token is None or not self._elector.is_leader():
            return None
        return LeaderInfo(self._id, token.epoch, token.lock_node, since_ms=0)

    def _nimbus_infos(self) -> list[pb.NimbusInfo]:
        """Every live replica as this replica's watch-fed cache sees it."""
        leader = self._own_term() or self._cache.leader()
        now_ms = int(time.time() * 1000)
        infos: list[pb.NimbusInfo] = []
        for address, summary in sorted(self._cache.nimbuses().items()):
            if address == self._id:
                is_leader = self._elector.is_leader()
            else:
                is_leader = leader is not None and leader.address == address
            host, _, port = address.rpartition(":")
            infos.append(
                pb.NimbusInfo(
                    address=address,
                    host=host,
                    port=int(port) if port.isdigit() else 0,
                    role=records.LEADER if is_leader else records.FOLLOWER,
                    is_leader=is_leader,
                    epoch=leader.epoch if is_leader and leader else summary.epoch,
                    uptime_s=max(0.0, (now_ms - summary.start_time_ms) / 1000.0),
                    code_sync_lag=summary.code_sync_lag,
                    version=summary.version,
                )
            )
        return infos

    # -- leader only ---------------------------------------------------------------------

    def SubmitTopology(
        self, request_iterator: Iterator[pb.SubmitTopologyRequest], context: grpc.ServicerContext
    ) -> pb.SubmitTopologyResponse:
        if not self._elector.is_leader():
            return self._elsewhere(
                context,
                lambda s, t, m: s.SubmitTopology.future(request_iterator, timeout=t, metadata=m),
            )
        api = self._require_api(context, "SubmitTopology")
        return self._call(context, lambda: api.submit(request_iterator))

    def KillTopology(
        self, request: pb.KillTopologyRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        if not self._elector.is_leader():
            return self._elsewhere(
                context, lambda s, t, m: s.KillTopology.future(request, timeout=t, metadata=m)
            )
        api = self._require_api(context, "KillTopology")
        return self._call(context, lambda: api.kill(request))

    def ActivateTopology(
        self, request: pb.TopologyNameRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        if not self._elector.is_leader():
            return self._elsewhere(
                context, lambda s, t, m: s.ActivateTopology.future(request, timeout=t, metadata=m)
            )
        api = self._require_api(context, "ActivateTopology")
        return self._call(context, lambda: api.activate(request))

    def DeactivateTopology(
        self, request: pb.TopologyNameRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        if not self._elector.is_leader():
            return self._elsewhere(
                context, lambda s, t, m: s.DeactivateTopology.future(request, timeout=t, metadata=m)
            )
        api = self._require_api(context, "DeactivateTopology")
        return self._call(context, lambda: api.deactivate(request))

    def RebalanceTopology(
        self, request: pb.RebalanceTopologyRequest, context: grpc.ServicerContext
    ) -> pb.TopologyActionResponse:
        if not self._elector.is_leader():
            return self._elsewhere(
                context, lambda s, t, m: s.RebalanceTopology.future(request, timeout=t, metadata=m)
            )
        api = self._require_api(context, "RebalanceTopology")
        return self._call(context, lambda: api.rebalance(request))

    def Handover(
        self, request: pb.HandoverRequest, context: grpc.ServicerContext
    ) -> pb.HandoverResponse:
        if not self._elector.is_leader():
            return self._elsewhere(
                context, lambda s, t, m: s.Handover.future(request, timeout=t, metadata=m)
            )
        api = self._require_api(context, "Handover")
        return self._call(context, lambda: api.handover(request))

    # -- every replica -------------------------------------------------------------------

    def ListTopologies(
        self, request: pb.ListTopologiesRequest, context: grpc.ServicerContext
    ) -> pb.ListTopologiesResponse:
        api = self._require_api(context, "ListTopologies")
        return self._call(context, api.list_topologies)

    def GetTopology(
        self, request: pb.GetTopologyRequest, context: grpc.ServicerContext
    ) -> pb.TopologyDetail:
        api = self._require_api(context, "GetTopology")
        return self._call(context, lambda: api.describe(request.name))

    def GetClusterSummary(
        self, request: pb.GetClusterSummaryRequest, context: grpc.ServicerContext
    ) -> pb.ClusterSummary:
        """Storm's ``getClusterInfo``: replicas, supervisors and topologies in one answer."""
        self._require_fresh(context)
        api = self._require_api(context, "GetClusterSummary")
        leader = self._cache.leader()

        def gather() -> pb.ClusterSummary:
            return pb.ClusterSummary(
                nimbuses=self._nimbus_infos(),
                supervisors=api.list_supervisors(),
                topologies=api.list_topologies().topologies,
                leader_epoch=leader.epoch if leader else 0,
            )

        return self._call(context, gather)

    def DownloadCode(
        self, request: pb.DownloadCodeRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.CodeChunk]:
        api = self._require_api(context, "DownloadCode")
        chunks: Iterator[pb.CodeChunk] = self._call(
            context, lambda: api.download(request.digest, request.offset)
        )
        try:
            yield from chunks
        except ApiError as e:
            context.abort(e.code, e.message)

    def PushCode(
        self, request_iterator: Iterator[pb.PushCodeRequest], context: grpc.ServicerContext
    ) -> pb.PushCodeResponse:
        """A package the leader sends to this replica while a submit waits for replicas
        (``code_sync.push``); served by every replica."""
        api = self._require_api(context, "PushCode")
        return self._call(context, lambda: api.push(request_iterator))

    # -- helpers ------------------------------------------------------------------------

    def _require_fresh(self, context: grpc.ServicerContext) -> None:
        if not self._elector.lease.valid():
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"replica {self._id} has no recent word from ZooKeeper; ask another replica",
            )

    def _call(self, context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
        """Run ``fn``; its ``ApiError`` becomes the status, lost leadership a redirect."""
        try:
            return fn()
        except ApiError as e:
            context.abort(e.code, e.message)
        except NotLeaderError:
            self._redirect(context)

    def _require_api(self, context: grpc.ServicerContext, name: str) -> TopologyApi:
        if self._api is None:
            self._not_yet(context, name)
        return self._api

    def _elsewhere(self, context: grpc.ServicerContext, call: Call[T]) -> T:
        """Not the leader: forward when asked to and a leader is known, else redirect."""
        leader = self._cache.leader() if self._elector.lease.valid() else None
        if (
            self._forwarder is not None
            and leader is not None
            and leader.address != self._id
            and wants_forwarding(context)
        ):
            return self._forwarder.forward(leader.address, context, call)
        self._redirect(context)

    def _redirect(self, context: grpc.ServicerContext) -> NoReturn:
        leader = self._cache.leader() if self._elector.lease.valid() else None
        if leader is not None and leader.address != self._id:
            context.set_trailing_metadata(
                (
                    (LEADER_METADATA_KEY, leader.address),
                    (LEADER_EPOCH_METADATA_KEY, str(leader.epoch)),
                )
            )
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{self._id} is not the leader; the leader is {leader.address} "
                f"(epoch {leader.epoch})",
            )
        context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"{self._id} is not the leader and no leader is known right now",
        )
        raise AssertionError("unreachable: abort raises")

    @staticmethod
    def _not_yet(context: grpc.ServicerContext, name: str) -> NoReturn:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not served by this server")
