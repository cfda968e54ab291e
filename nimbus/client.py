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
  the call goes to a follower that answered, asking it to forward (``nimbus.server.forward``):
  a client cut from the leader alone still gets through, and a dead leader's successor
  is found as soon as discovery names it.
- **Exactly once**: a mutating call carries a client request id, the same on every
  retry (a submit's stream is re-sent whole), so the server returns the first outcome.
- Errors name what happened and what the replicas answered.

Which replica a call goes to (discovery, routing, what a failure means) is
``nimbus.discovery``'s; this module makes the calls: deadlines, retries, hedging.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from cluster.api import pb, rpc
from cluster.security.client import ClientSecurity
from nimbus.call_errors import refused_message
from nimbus.discovery import (
    PER_SEED_TIMEOUT_S,
    REFUSED,
    Discovery,
    NimbusCallError,
    NoLeaderError,
    Retry,
    parse_seeds,
)

__all__ = [
    "MUTATE_DEADLINE_S",
    "PER_SEED_TIMEOUT_S",
    "READ_DEADLINE_S",
    "SUBMIT_DEADLINE_S",
    "NimbusCallError",
    "NimbusClient",
    "NoLeaderError",
    "backoff_cap",
    "new_request_id",
    "parse_seeds",
]

T = TypeVar("T")

MUTATE_DEADLINE_S = 30.0
#: A submit's default deadline: the leader may take its sandboxed check (``--validate-
#: timeout``, 20 s) and the wait for a second copy (``--replication-wait``, 30 s) first.
SUBMIT_DEADLINE_S = 90.0
#: Reads too must outlast a failover: with ZooKeeper's disk slow (0.9 s fsyncs) a leader
#: SIGKILLed is replaced after 12-14 s (bench/results/chaos-cli-T20.json), and a 10 s
#: read deadline failed `nimbus list` calls made just before the kill.
READ_DEADLINE_S = 30.0
#: A leader-only call unanswered this long makes the client look, every HEDGE_EVERY_S,
#: for a replica leading a newer term; if one does, the call is given up and re-sent
#: there with the same request id. A frozen or stuck leader then costs about the
#: failover, not a keepalive timeout plus a forward to the same frozen leader.
HEDGE_AFTER_S = 1.0
HEDGE_EVERY_S = 0.25
#: The slowest upload a submit attempt allows for, on top of the call's deadline.
MIN_UPLOAD_BYTES_PER_S = 1024 * 1024
SAFETY_ATTEMPTS = 10_000
#: The longest pause between two attempts of one call (full jitter below it). A failover
#: takes 0.6-3 s; with pauses of up to 1 s the first call through came a second after the
#: new leader took office. An attempt costs a few cheap replies, so a quarter second.
MAX_BACKOFF_S = 0.25

#: Leader-only unary calls by name, each as a typed stub method.
_LEADER_CALLS: dict[str, Callable[[rpc.NimbusStub], Any]] = {
    "KillTopology": lambda s: s.KillTopology,
    "ActivateTopology": lambda s: s.ActivateTopology,
    "DeactivateTopology": lambda s: s.DeactivateTopology,
    "RebalanceTopology": lambda s: s.RebalanceTopology,
    "Handover": lambda s: s.Handover,
}


def new_request_id() -> str:
    return uuid.uuid4().hex


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
        max_backoff: float = MAX_BACKOFF_S,
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
        self._call_timeout = call_timeout
        self._attempts = max(1, attempts)
        self._max_backoff = max_backoff
        self._clock = clock
        self._sleep = sleep
        self._discovery = Discovery(
            self.seeds, per_seed_timeout=per_seed_timeout, security=security, clock=clock
        )

    @property
    def max_epoch_seen(self) -> int:
        """The newest term any answer named: the client never goes back to an older one."""
        return self._discovery.max_epoch_seen

    @property
    def leader_claims(self) -> list[tuple[str, int]]:
        """Every "I am the leader" answer, as sent: (responder, epoch). For checkers."""
        return self._discovery.leader_claims

    def close(self) -> None:
        self._discovery.close()

    def __enter__(self) -> NimbusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- discovery ---------------------------------------------------------------------

    def leader(self) -> pb.GetLeaderAddressResponse:
        """The current leader; never one of an older epoch than already seen."""
        return self._retrying(self._read_deadline, self._discovery.find_leader, "GetLeaderAddress")

    def nimbuses(self) -> pb.GetAllNimbusAddressesResponse:
        return self._retrying(
            self._read_deadline, self._discovery.nimbuses, "GetAllNimbusAddresses"
        )

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
            address, metadata = self._discovery.route(end)
            epoch, timeout = self.max_epoch_seen, self._attempt_timeout(end)
            try:
                call = stub_method(self._discovery.stub(address)).future(
                    request, timeout=timeout, metadata=metadata
                )
                return self._await_leader(call, address, epoch)
            except grpc.RpcError as e:
                raise self._discovery.failed(address, e, relayed=bool(metadata)) from e

        return self._retrying(deadline, attempt, method)

    def handover(self, to: str = "") -> pb.HandoverResponse:
        """Hand leadership to ``to`` (empty: the next in line); the new term's leader."""
        reply: pb.HandoverResponse = self.call_leader("Handover", pb.HandoverRequest(to=to))
        return reply

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
            address, metadata = self._discovery.route(end)
            epoch = self.max_epoch_seen
            try:
                call = self._discovery.stub(address).SubmitTopology.future(
                    requests(), timeout=max(0.1, end - self._clock()), metadata=metadata
                )
                reply: pb.SubmitTopologyResponse = self._await_leader(call, address, epoch)
            except grpc.RpcError as e:
                raise self._discovery.failed(address, e, relayed=bool(metadata)) from e
            return reply

        return self._retrying(deadline, attempt, "SubmitTopology")

    # -- reads (any replica; the leader first, for freshness) ----------------------------

    def describe(self, name: str) -> pb.TopologyDetail:
        request = pb.GetTopologyRequest(name=name)
        reply: pb.TopologyDetail = self._read(lambda s: s.GetTopology, request, "GetTopology")
        return reply

    def list_topologies(self) -> pb.ListTopologiesResponse:
        request = pb.ListTopologiesRequest()
        reply: pb.ListTopologiesResponse = self._read(
            lambda s: s.ListTopologies, request, "ListTopologies"
        )
        return reply

    def cluster_summary(self) -> pb.ClusterSummary:
        request = pb.GetClusterSummaryRequest()
        reply: pb.ClusterSummary = self._read(
            lambda s: s.GetClusterSummary, request, "GetClusterSummary"
        )
        return reply

    def _read(self, method: Callable[[rpc.NimbusStub], Any], request: Any, name: str) -> Any:
        def attempt(end: float) -> Any:
            address, relayed = self._discovery.read_route(end)
            epoch, timeout = self.max_epoch_seen, self._attempt_timeout(end)
            try:
                # Hedged as a leader call is: a replica cut from ZooKeeper still answers
                # gRPC but its read blocks on its session; a newer term elsewhere ends it.
                call = method(self._discovery.stub(address)).future(request, timeout=timeout)
                return self._await_leader(call, address, epoch)
            except grpc.RpcError as e:
                raise self._discovery.failed(address, e, relayed=relayed) from e

        return self._retrying(self._read_deadline, attempt, name)

    # -- internals ----------------------------------------------------------------------

    def _await_leader(self, call: Any, address: str, epoch: int) -> Any:
        """The reply of a leader-only ``call`` sent to ``address`` while ``epoch`` was the
        newest term known; given up (``Retry``) once another replica leads a newer one.

        The call's own deadline still ends it; a failure is raised as its ``RpcError``.
        """
        look_at = self._clock() + HEDGE_AFTER_S
        while True:
            try:
                return call.result(timeout=max(0.0, look_at - self._clock()))
            except grpc.FutureTimeoutError:
                pass
            newer = self._discovery.newer_leader(epoch)
            if newer is not None:
                call.cancel()
                raise Retry(
                    f"{address} did not answer within {HEDGE_AFTER_S:g}s and "
                    f"{newer.replica_id} leads a newer term (epoch {newer.epoch})"
                )
            look_at = self._clock() + HEDGE_EVERY_S

    def _refused(self, code: grpc.StatusCode, call: str) -> NimbusCallError:
        sent_token = bool(self._discovery.security.token)
        return NimbusCallError(refused_message(code, call, sent_token=sent_token), code)

    def _attempt_timeout(self, end: float) -> float:
        left = max(0.1, end - self._clock())
        return min(left, self._call_timeout) if self._call_timeout else left

    def _retrying(
        self, deadline: float, attempt: Callable[[float], T], call: str = "the call"
    ) -> T:
        """Run ``attempt(end)`` until it succeeds, fails for good, or the deadline passes.
        Refused credentials are told as ``call``'s (the user's call, though discovery's
        own call may be the one refused)."""
        start = self._clock()
        end = start + deadline
        last = "no attempt"
        for number in range(self._attempts):
            try:
                return attempt(end)
            except Retry as e:
                last = e.why
            except grpc.RpcError as e:  # refused credentials, from discovery
                raise self._refused(e.code(), call) from e
            except NimbusCallError as e:
                if e.code in REFUSED:
                    raise self._refused(e.code, call) from e
                raise
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
