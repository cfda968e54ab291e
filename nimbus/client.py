"""``NimbusClient``: finds the leader through any seed, follows redirects, rides failovers.

- Discovery asks the cached leader first, then each seed; an answer with a lower epoch
  than one already seen is a lagging replica's and is ignored.
- A leader-only call answered ``FAILED_PRECONDITION`` with the leader's address in
  trailing metadata is re-sent there; ``UNAVAILABLE`` drops the cached leader and retries
  with jittered exponential backoff (tenacity) within a bounded number of attempts and
  an overall deadline.
- Mutating calls carry a client request id, kept across retries, so the server can
  return the first outcome of a retried call instead of doing the work twice.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import grpc
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from cluster.api import pb, rpc
from cluster.errors import NimbusError
from cluster.factory import make_channel
from cluster.security.client import ClientSecurity
from nimbus.servicer import LEADER_EPOCH_METADATA_KEY, LEADER_METADATA_KEY

T = TypeVar("T")


class NoLeaderError(NimbusError):
    """No seed could name a leader within the retry budget."""


class NimbusCallError(NimbusError):
    """A call failed with a gRPC status that retrying cannot fix."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


class _Redirect(Exception):
    def __init__(self, address: str, epoch: int) -> None:
        super().__init__(address)
        self.address = address
        self.epoch = epoch


_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Credentials the server refused: every seed would say the same, so fail at once.
_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def _retryable(error: BaseException) -> bool:
    if isinstance(error, _Redirect | NoLeaderError):
        return True
    return isinstance(error, grpc.RpcError) and error.code() in _RETRYABLE


def new_request_id() -> str:
    return uuid.uuid4().hex


def parse_seeds(seeds: str | Iterable[str]) -> list[str]:
    items = seeds.split(",") if isinstance(seeds, str) else list(seeds)
    parsed = [s.strip() for s in items if s.strip()]
    if not parsed:
        raise ValueError("at least one seed address (host:port) is needed")
    return parsed


class NimbusClient:
    def __init__(
        self,
        seeds: str | Sequence[str],
        *,
        call_timeout: float = 5.0,
        attempts: int = 12,
        deadline: float = 30.0,
        max_backoff: float = 1.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.seeds = parse_seeds(seeds)
        self._call_timeout = call_timeout
        self._attempts = attempts
        self._deadline = deadline
        self._max_backoff = max_backoff
        self._security = security  # TLS and token; None: the process default
        self._security = security  # TLS and token; None: the process default
        self._channels: dict[str, grpc.Channel] = {}
        self._guard = threading.Lock()
        self._leader: str | None = None
        self.max_epoch_seen = 0

    def close(self) -> None:
        with self._guard:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> NimbusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- discovery ---------------------------------------------------------------------

    def leader(self) -> pb.GetLeaderAddressResponse:
        """The current leader, retried within the budget; never an older epoch."""
        return self._retrying(self._find_leader)

    def nimbuses(self) -> pb.GetAllNimbusAddressesResponse:
        def ask() -> pb.GetAllNimbusAddressesResponse:
            last: grpc.RpcError | None = None
            for address in self._candidates():
                try:
                    reply: pb.GetAllNimbusAddressesResponse = self._stub(
                        address
                    ).GetAllNimbusAddresses(
                        pb.GetAllNimbusAddressesRequest(), timeout=self._call_timeout
                    )
                except grpc.RpcError as e:
                    if e.code() in _REFUSED:
                        raise
                    last = e
                    continue
                if reply.leader_epoch >= self.max_epoch_seen:
                    self.max_epoch_seen = max(self.max_epoch_seen, reply.leader_epoch)
                    return reply
            raise NoLeaderError(f"no replica answered: {_describe(last)}")

        return self._retrying(ask)

    # -- leader-only calls --------------------------------------------------------------

    def call_leader(self, method: str, request: Any) -> Any:
        """Send a unary leader-only call (``method`` as named in the service)."""
        if hasattr(request, "client_request_id") and not request.client_request_id:
            request.client_request_id = new_request_id()

        def attempt() -> Any:
            address = self._leader or self._find_leader().replica_id
            try:
                return getattr(self._stub(address), method)(request, timeout=self._call_timeout)
            except grpc.RpcError as e:
                self._handle_leader_error(address, e)
                raise

        return self._retrying(attempt)

    def submit(
        self,
        header: pb.SubmitHeader,
        chunks: Callable[[], Iterator[bytes]],
        *,
        timeout: float = 600.0,
    ) -> pb.SubmitTopologyResponse:
        """Stream a package to the leader: the header, then ``chunks()`` (re-made per attempt).

        The header's ``client_request_id`` is filled in once and kept across retries.
        """
        if not header.client_request_id:
            header.client_request_id = new_request_id()

        def requests() -> Iterator[pb.SubmitTopologyRequest]:
            yield pb.SubmitTopologyRequest(header=header)
            for chunk in chunks():
                yield pb.SubmitTopologyRequest(chunk=chunk)

        def attempt() -> pb.SubmitTopologyResponse:
            address = self._leader or self._find_leader().replica_id
            try:
                reply: pb.SubmitTopologyResponse = self._stub(address).SubmitTopology(
                    requests(), timeout=timeout
                )
            except grpc.RpcError as e:
                self._handle_leader_error(address, e)
                raise
            return reply

        return self._retrying(attempt)

    def describe(self, name: str) -> pb.TopologyDetail:
        reply: pb.TopologyDetail = self.call_any("GetTopology", pb.GetTopologyRequest(name=name))
        return reply

    def list_topologies(self) -> pb.ListTopologiesResponse:
        reply: pb.ListTopologiesResponse = self.call_any(
            "ListTopologies", pb.ListTopologiesRequest()
        )
        return reply

    def cluster_summary(self) -> pb.ClusterSummary:
        reply: pb.ClusterSummary = self.call_any("GetClusterSummary", pb.GetClusterSummaryRequest())
        return reply

    def call_any(self, method: str, request: Any) -> Any:
        """A read served by every replica; asked of the leader first, for freshness."""

        def ask() -> Any:
            address = self._leader or self._find_leader().replica_id
            try:
                return getattr(self._stub(address), method)(request, timeout=self._call_timeout)
            except grpc.RpcError as e:
                self._handle_leader_error(address, e)
                raise

        return self._retrying(ask)

    # -- internals ----------------------------------------------------------------------

    def _find_leader(self) -> pb.GetLeaderAddressResponse:
        last: grpc.RpcError | None = None
        for address in self._candidates():
            try:
                reply: pb.GetLeaderAddressResponse = self._stub(address).GetLeaderAddress(
                    pb.GetLeaderAddressRequest(), timeout=self._call_timeout
                )
            except grpc.RpcError as e:
                if e.code() in _REFUSED:
                    raise
                last = e
                continue
            if reply.epoch < self.max_epoch_seen:
                continue  # a lagging replica's memory
            self.max_epoch_seen = reply.epoch
            self._leader = reply.replica_id
            return reply
        self._leader = None
        raise NoLeaderError(f"no leader known by any seed ({_describe(last)})")

    def _handle_leader_error(self, address: str, error: grpc.RpcError) -> None:
        code = error.code()
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            metadata = {str(m.key): str(m.value) for m in error.trailing_metadata() or ()}
            target = metadata.get(LEADER_METADATA_KEY)
            epoch = int(metadata.get(LEADER_EPOCH_METADATA_KEY, "0") or 0)
            if target and epoch >= self.max_epoch_seen:
                self.max_epoch_seen = epoch
                self._leader = str(target)
                raise _Redirect(str(target), epoch) from error
            self._leader = None
            raise _Redirect("", epoch) from error
        if code in _RETRYABLE:
            self._leader = None

    def _candidates(self) -> list[str]:
        ordered = [self._leader] if self._leader else []
        return ordered + [s for s in self.seeds if s != self._leader]

    def _stub(self, address: str) -> rpc.NimbusStub:
        with self._guard:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = make_channel(address, self._security)
        return rpc.NimbusStub(channel)

    def _retrying(self, fn: Callable[[], T]) -> T:
        retrying = Retrying(
            stop=stop_after_attempt(self._attempts) | stop_after_delay(self._deadline),
            wait=wait_random_exponential(multiplier=0.05, max=self._max_backoff),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        try:
            result: T = retrying(fn)
        except _Redirect as e:
            raise NoLeaderError(f"still redirected after retries (last: {e.address})") from e
        except grpc.RpcError as e:
            raise NimbusCallError(_describe(e), e.code()) from e
        return result


def _describe(error: grpc.RpcError | None) -> str:
    if error is None:
        return "no answer"
    details = error.details() if hasattr(error, "details") else ""
    return f"{error.code().name}: {details}"
