"""``NimbusClient``: finds the leader through any seed, follows redirects, rides failovers.

What a user of the CLI or of this library gets, with default settings:

- **A deadline governs each call, not a count of attempts**: 30 s for mutating calls
  (90 s plus the upload for a submit: the leader's check and replication come first),
  10 s for reads (``deadline=`` sets both). Within it, ``UNAVAILABLE`` (a refused
  connection, a dropped one, a replica that lost ZooKeeper or leadership mid-call) and
  redirects are retried with jittered backoff; a count of attempts remains only as a
  safety valve far above what the deadline allows.
- **Hedged discovery**: every seed is asked at once, each with a short deadline (1 s),
  and the answer with the highest epoch wins, so one frozen or black-holed replica never
  costs more than that. An answer with a lower epoch than one already seen is a lagging
  replica's memory and is ignored.
- **A dead leader is noticed within about two seconds**: channels ping (gRPC keepalive,
  ``cluster.factory``). While a leader that failed a call is still named by discovery,
  the call goes to a follower that answered, asking it to forward (``nimbus.forward``):
  a client cut from the leader alone still gets through, and a dead leader's successor
  is found as soon as discovery names it.
- **Exactly once**: a mutating call carries a client request id, the same on every
  retry (a submit's stream is re-sent whole), so the server returns the first outcome.
- Errors name what happened and what the replicas answered.
"""

from __future__ import annotations

import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from cluster.api import pb, rpc
from cluster.errors import NimbusError
from cluster.factory import make_channel
from cluster.security.client import ClientSecurity
from nimbus.forward import FORWARD_METADATA_KEY
from nimbus.servicer import LEADER_EPOCH_METADATA_KEY, LEADER_METADATA_KEY

T = TypeVar("T")
Metadata = tuple[tuple[str, str], ...]
_FORWARD: Metadata = ((FORWARD_METADATA_KEY, "1"),)

MUTATE_DEADLINE_S = 30.0
#: A submit's default deadline: the leader may take its sandboxed check (``--validate-
#: timeout``, 20 s) and the wait for a second copy (``--replication-wait``, 30 s) first.
SUBMIT_DEADLINE_S = 90.0
READ_DEADLINE_S = 10.0
PER_SEED_TIMEOUT_S = 1.0
#: A leader whose call failed is skipped this long unless discovery names a newer term.
SUSPECT_HOLD_S = 1.0
#: A leader-only call unanswered this long makes the client look, every HEDGE_EVERY_S,
#: for a replica leading a newer term; if one does, the call is given up and re-sent
#: there with the same request id. A frozen or stuck leader then costs about the
#: failover, not a keepalive timeout plus a forward to the same frozen leader.
HEDGE_AFTER_S = 1.0
HEDGE_EVERY_S = 0.5
#: The slowest upload a submit attempt allows for, on top of the call's deadline.
MIN_UPLOAD_BYTES_PER_S = 1024 * 1024
SAFETY_ATTEMPTS = 10_000


class NoLeaderError(NimbusError):
    """No leader could be reached before the deadline."""


class NimbusCallError(NimbusError):
    """A call failed with a gRPC status that retrying cannot fix."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Credentials the server refused: every seed would say the same, so fail at once.
_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)

#: Leader-only unary calls by name, each as a typed stub method.
_LEADER_CALLS: dict[str, Callable[[rpc.NimbusStub], Any]] = {
    "KillTopology": lambda s: s.KillTopology,
    "ActivateTopology": lambda s: s.ActivateTopology,
    "DeactivateTopology": lambda s: s.DeactivateTopology,
    "RebalanceTopology": lambda s: s.RebalanceTopology,
}


def new_request_id() -> str:
    return uuid.uuid4().hex


def parse_seeds(seeds: str | Iterable[str]) -> list[str]:
    items = seeds.split(",") if isinstance(seeds, str) else list(seeds)
    parsed = [s.strip() for s in items if s.strip()]
    if not parsed:
        raise ValueError("at least one seed address (host:port) is needed")
    return parsed


class _Retry(Exception):
    """One attempt failed in a way worth another; ``why`` says how, for the final error."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class _Suspect:
    address: str
    epoch: int
    since: float


class NimbusClient:
    def __init__(
        self,
        seeds: str | Sequence[str],
        *,
        deadline: float | None = None,
        read_deadline: float | None = None,
        per_seed_timeout: float = PER_SEED_TIMEOUT_S,
        call_timeout: float | None = None,
        attempts: int = SAFETY_ATTEMPTS,
        max_backoff: float = 1.0,
        security: ClientSecurity | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``deadline``: seconds per call (mutating, and reads unless ``read_deadline``).
        ``call_timeout``: a cap on one attempt of a unary call (default: the deadline
        left; keepalive notices a dead server sooner). ``attempts``: a safety valve."""
        self.seeds = parse_seeds(seeds)
        for name, value in (("deadline", deadline), ("read_deadline", read_deadline)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value}")
        self._mutate_deadline = deadline or MUTATE_DEADLINE_S
        self._read_deadline = read_deadline or deadline or READ_DEADLINE_S
        self._per_seed = per_seed_timeout
        self._call_timeout = call_timeout
        self._attempts = max(1, attempts)
        self._max_backoff = max_backoff
        self._security = security  # TLS and token; None: the process default
        self._clock = clock
        self._sleep = sleep
        self._channels: dict[str, grpc.Channel] = {}
        self._guard = threading.Lock()
        self._leader: str | None = None
        self._suspect: _Suspect | None = None
        self._relays: list[str] = []  # replicas that answered the last discovery
        self.max_epoch_seen = 0
        #: Every "I am the leader" answer, as sent: (responder, epoch). For checkers.
        self.leader_claims: list[tuple[str, int]] = []

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
        """The current leader; never one of an older epoch than already seen."""
        return self._retrying(self._read_deadline, lambda end: self._find_leader(end))

    def nimbuses(self) -> pb.GetAllNimbusAddressesResponse:
        def ask(end: float) -> pb.GetAllNimbusAddressesResponse:
            replies = self._ask_all(lambda s, t: s.GetAllNimbusAddresses.future(
                pb.GetAllNimbusAddressesRequest(), timeout=t), end)  # fmt: skip
            fresh = [r for r in replies if r.leader_epoch >= self.max_epoch_seen]
            if not fresh:
                raise _Retry("no replica answered with a current view")
            best: pb.GetAllNimbusAddressesResponse = max(fresh, key=lambda r: r.leader_epoch)
            self.max_epoch_seen = max(self.max_epoch_seen, best.leader_epoch)
            return best

        return self._retrying(self._read_deadline, ask)

    # -- leader-only calls --------------------------------------------------------------

    def call_leader(self, method: str, request: Any) -> Any:
        """A unary leader-only call (``method`` as named in the service)."""
        try:
            stub_method = _LEADER_CALLS[method]
        except KeyError as e:
            raise ValueError(f"{method} is not a leader-only unary call") from e
        if not request.client_request_id:
            request.client_request_id = new_request_id()
        # The reply comes when the change is recorded, not after a kill's or rebalance's
        # ``--wait``: the caller's deadline (``--timeout``) is the whole budget.
        deadline = self._mutate_deadline

        def attempt(end: float) -> Any:
            address, metadata = self._route(end)
            epoch, timeout = self.max_epoch_seen, self._attempt_timeout(end)
            try:
                call = stub_method(self._stub(address)).future(
                    request, timeout=timeout, metadata=metadata
                )
                return self._await_leader(call, address, epoch)
            except grpc.RpcError as e:
                raise self._leader_failed(address, e, relayed=bool(metadata)) from e

        return self._retrying(deadline, attempt)

    def kill(self, request: pb.KillTopologyRequest) -> pb.TopologyActionResponse:
        reply: pb.TopologyActionResponse = self.call_leader("KillTopology", request)
        return reply

    def submit(
        self,
        header: pb.SubmitHeader,
        chunks: Callable[[], Iterator[bytes]],
        *,
        timeout: float | None = None,
    ) -> pb.SubmitTopologyResponse:
        """Stream a package to the leader: the header, then ``chunks()`` (re-made per attempt).

        The header's ``client_request_id`` is filled in once and kept across retries.
        ``timeout`` is the whole call's deadline (default: the mutating deadline plus the
        package's size at the slowest upload rate allowed for).
        """
        if not header.client_request_id:
            header.client_request_id = new_request_id()
        upload_s = header.package_size / MIN_UPLOAD_BYTES_PER_S
        default = max(self._mutate_deadline, SUBMIT_DEADLINE_S) + upload_s
        deadline = timeout if timeout is not None else default

        def requests() -> Iterator[pb.SubmitTopologyRequest]:
            yield pb.SubmitTopologyRequest(header=header)
            for chunk in chunks():
                yield pb.SubmitTopologyRequest(chunk=chunk)

        def attempt(end: float) -> pb.SubmitTopologyResponse:
            address, metadata = self._route(end)
            epoch = self.max_epoch_seen
            try:
                call = self._stub(address).SubmitTopology.future(
                    requests(), timeout=max(0.1, end - self._clock()), metadata=metadata
                )
                reply: pb.SubmitTopologyResponse = self._await_leader(call, address, epoch)
            except grpc.RpcError as e:
                raise self._leader_failed(address, e, relayed=bool(metadata)) from e
            return reply

        return self._retrying(deadline, attempt)

    # -- reads (any replica; the leader first, for freshness) ----------------------------

    def describe(self, name: str) -> pb.TopologyDetail:
        request = pb.GetTopologyRequest(name=name)
        reply: pb.TopologyDetail = self._read(lambda s: s.GetTopology, request)
        return reply

    def list_topologies(self) -> pb.ListTopologiesResponse:
        request = pb.ListTopologiesRequest()
        reply: pb.ListTopologiesResponse = self._read(lambda s: s.ListTopologies, request)
        return reply

    def cluster_summary(self) -> pb.ClusterSummary:
        request = pb.GetClusterSummaryRequest()
        reply: pb.ClusterSummary = self._read(lambda s: s.GetClusterSummary, request)
        return reply

    def _read(self, method: Callable[[rpc.NimbusStub], Any], request: Any) -> Any:
        def attempt(end: float) -> Any:
            address, relayed = self._read_route(end)
            epoch, timeout = self.max_epoch_seen, self._attempt_timeout(end)
            try:
                # Hedged as a leader call is: a replica cut from ZooKeeper still answers
                # gRPC but its read blocks on its session; a newer term elsewhere ends it.
                call = method(self._stub(address)).future(request, timeout=timeout)
                return self._await_leader(call, address, epoch)
            except grpc.RpcError as e:
                raise self._leader_failed(address, e, relayed=relayed) from e

        return self._retrying(self._read_deadline, attempt)

    # -- internals ----------------------------------------------------------------------

    def _await_leader(self, call: Any, address: str, epoch: int) -> Any:
        """The reply of a leader-only ``call`` sent to ``address`` while ``epoch`` was the
        newest term known; given up (``_Retry``) once another replica leads a newer one.

        The call's own deadline still ends it; a failure is raised as its ``RpcError``.
        """
        look_at = self._clock() + HEDGE_AFTER_S
        while True:
            try:
                return call.result(timeout=max(0.0, look_at - self._clock()))
            except grpc.FutureTimeoutError:
                pass
            newer = self._newer_leader(epoch)
            if newer is not None:
                call.cancel()
                raise _Retry(
                    f"{address} did not answer within {HEDGE_AFTER_S:g}s and "
                    f"{newer.replica_id} leads a newer term (epoch {newer.epoch})"
                )
            look_at = self._clock() + HEDGE_EVERY_S

    def _newer_leader(self, epoch: int) -> pb.GetLeaderAddressResponse | None:
        """A replica that says it leads a term newer than ``epoch``, now the one to call."""
        try:
            replies = self._ask_all(
                lambda s, t: s.GetLeaderAddress.future(pb.GetLeaderAddressRequest(), timeout=t),
                self._clock() + self._per_seed,
            )
        except _Retry:
            return None
        self._note_claims(replies)
        leading = [r for r in replies if r.responder_is_leader and r.epoch > epoch]
        if not leading:
            return None
        best: pb.GetLeaderAddressResponse = max(leading, key=lambda r: r.epoch)
        if best.epoch < self.max_epoch_seen:
            return None  # older than a term this client already saw
        self.max_epoch_seen = int(best.epoch)
        self._leader, self._suspect = best.replica_id, None
        return best

    def _note_claims(self, replies: list[pb.GetLeaderAddressResponse]) -> None:
        """Keep the newest "I am the leader" answers, as sent (for the chaos checkers)."""
        for reply in replies:
            if reply.responder_is_leader:
                self.leader_claims.append((reply.responder, int(reply.epoch)))
        del self.leader_claims[:-1000]

    def _route(self, end: float) -> tuple[str, Metadata]:
        """Where to send a leader-only call: the leader, or a follower asked to forward
        while the leader discovery names is one that just failed us."""
        if self._leader is not None:
            return self._leader, ()
        best = self._find_leader(end)
        suspect = self._suspect
        if (
            suspect is not None
            and best.replica_id == suspect.address
            and best.epoch <= suspect.epoch
            and self._clock() - suspect.since < SUSPECT_HOLD_S
        ):
            self._leader = None
            relays = [r for r in self._relays if r != best.replica_id]
            if not relays:
                raise _Retry(f"the leader {best.replica_id} (epoch {best.epoch}) did not answer")
            return random.choice(relays), _FORWARD
        self._suspect = None
        return best.replica_id, ()

    def _find_leader(self, end: float) -> pb.GetLeaderAddressResponse:
        replies = self._ask_all(
            lambda s, t: s.GetLeaderAddress.future(pb.GetLeaderAddressRequest(), timeout=t), end
        )
        self._note_claims(replies)
        current = [r for r in replies if r.epoch >= self.max_epoch_seen]
        if not current:
            self._leader = None
            raise _Retry("no replica named a leader" if not replies else "only stale answers")
        best: pb.GetLeaderAddressResponse = max(current, key=lambda r: r.epoch)
        self._relays = [r.responder for r in replies if r.responder and r.epoch >= best.epoch]
        self.max_epoch_seen = max(self.max_epoch_seen, best.epoch)
        self._leader = best.replica_id
        return best

    def _ask_all(self, ask: Callable[[rpc.NimbusStub, float], Any], end: float) -> list[Any]:
        """Ask every seed at once; the answers that arrive within the per-seed deadline.

        Returns early once a replica answers that it is the leader itself: its epoch is
        its own term, and waiting for a frozen seed would only add its timeout.
        """
        timeout = max(0.05, min(self._per_seed, end - self._clock()))
        finished: queue.Queue[tuple[str, Any]] = queue.Queue()
        calls: list[Any] = []
        for address in self._seeds():
            call = ask(self._stub(address), timeout)
            call.add_done_callback(lambda f, a=address: finished.put((a, f)))
            calls.append(call)
        replies: list[Any] = []
        errors: list[str] = []
        give_up = self._clock() + timeout + 0.5  # each call ends by its own deadline anyway
        try:
            for _ in calls:
                left = give_up - self._clock()
                if left <= 0:
                    break
                try:
                    address, call = finished.get(timeout=left)
                except queue.Empty:
                    break
                try:
                    replies.append(call.result())
                except grpc.RpcError as e:
                    if e.code() in _REFUSED:
                        raise
                    errors.append(f"{address}: {_describe(e)}")
                if any(getattr(r, "responder_is_leader", False) for r in replies):
                    break
        finally:
            for call in calls:
                call.cancel()  # a no-op for those already done
        if not replies:
            raise _Retry("no seed answered (" + "; ".join(errors or ["no answer"]) + ")")
        return replies

    def _read_route(self, end: float) -> tuple[str, bool]:
        """Reads are served by any replica: a follower while the leader is suspect."""
        address, metadata = self._route(end)
        return address, bool(metadata)

    def _leader_failed(self, address: str, error: grpc.RpcError, *, relayed: bool) -> Exception:
        """What a failed leader call means: a redirect, a retry, or a final error.

        ``relayed``: ``address`` is a follower asked to forward (or to serve a read); its
        failure says nothing against it being reachable, so it is not held off."""
        code = error.code()
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            metadata = {str(m.key): str(m.value) for m in error.trailing_metadata() or ()}
            target = metadata.get(LEADER_METADATA_KEY)
            epoch = int(metadata.get(LEADER_EPOCH_METADATA_KEY, "0") or 0)
            if target and epoch >= self.max_epoch_seen:
                self.max_epoch_seen = epoch
                self._leader = str(target)
            else:
                self._leader = None
            return _Retry(f"{address} is not the leader ({error.details()})")
        if code in _RETRYABLE:
            self._leader = None
            if not relayed:
                self._suspect = _Suspect(address, self.max_epoch_seen, self._clock())
            return _Retry(f"{address}: {_describe(error)}")
        return NimbusCallError(_describe(error), code)

    def _seeds(self) -> list[str]:
        ordered = [self._leader] if self._leader else []
        return ordered + [s for s in self.seeds if s != self._leader]

    def _attempt_timeout(self, end: float) -> float:
        left = max(0.1, end - self._clock())
        return min(left, self._call_timeout) if self._call_timeout else left

    def _stub(self, address: str) -> rpc.NimbusStub:
        with self._guard:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = make_channel(address, self._security)
        return rpc.NimbusStub(channel)

    def _retrying(self, deadline: float, attempt: Callable[[float], T]) -> T:
        """Run ``attempt(end)`` until it succeeds, fails for good, or the deadline passes."""
        start = self._clock()
        end = start + deadline
        last = "no attempt"
        for number in range(self._attempts):
            try:
                return attempt(end)
            except _Retry as e:
                last = e.why
            except grpc.RpcError as e:  # refused credentials, from discovery
                raise NimbusCallError(_describe(e), e.code()) from e
            left = end - self._clock()
            if left <= 0:
                break
            backoff = random.uniform(0, backoff_cap(number, self._max_backoff))
            self._sleep(min(backoff, left))
            if self._clock() >= end:
                break
        raise NoLeaderError(
            f"no leader answered within {deadline:g}s (seeds {', '.join(self.seeds)}); "
            f"last: {last}. Check that the replicas run and reach ZooKeeper "
            "(`nimbus nimbuses`), or raise --timeout"
        )


def backoff_cap(attempt: int, most: float) -> float:
    """The longest pause after ``attempt`` failures: 50 ms doubling up to ``most``. The
    exponent is bounded first: ``2**n`` for a large ``n`` overflows a float."""
    return min(most, 0.05 * 2.0 ** min(attempt, 32))


def _describe(error: grpc.RpcError | None) -> str:
    if error is None:
        return "no answer"
    details = error.details() if hasattr(error, "details") else ""
    return f"{error.code().name}: {details}"
