"""Discovery and routing for ``NimbusClient``: which replica a call goes to.

- **Hedged discovery**: every seed is asked at once, each with a short deadline, and the
  answer with the highest epoch wins, so one frozen or black-holed replica never costs
  more than that. An answer with a lower epoch than one already seen is a lagging
  replica's memory and is ignored: the client never goes back to an older term.
- **Routing**: a leader-only call goes to the leader. While a leader that failed a call is
  still named by discovery (for ``SUSPECT_HOLD_S``), the call goes to a follower that
  answered, asking it to forward (``nimbus.server.forward``).
- **A failed call's meaning**: a redirect (the replica names the leader), a retry
  (``Retry``), or an error retrying cannot fix (``NimbusCallError``).

The state here (the leader, the newest epoch seen, the suspect, the relays, one channel
per address) is what the calls of one client share.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from cluster.api import pb, rpc
from cluster.errors import NimbusError
from cluster.factory import make_channel
from cluster.security import client as client_security
from cluster.security.client import ClientSecurity
from nimbus.call_errors import TlsMismatchError, tls_mismatch
from nimbus.call_metadata import (
    FORWARD_METADATA_KEY,
    LEADER_EPOCH_METADATA_KEY,
    LEADER_METADATA_KEY,
)

Metadata = tuple[tuple[str, str], ...]
_FORWARD: Metadata = ((FORWARD_METADATA_KEY, "1"),)

PER_SEED_TIMEOUT_S = 1.0
#: A leader whose call failed is skipped this long unless discovery names a newer term.
SUSPECT_HOLD_S = 1.0
#: Rounds in which every seed closes a plaintext connection before that is called a TLS
#: port: once could be replicas stopping; a TLS server closes every plaintext one.
CLOSED_ROUNDS = 2

_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Credentials the server refused: every seed would say the same, so fail at once.
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class NoLeaderError(NimbusError):
    """No leader could be reached before the deadline."""


class NimbusCallError(NimbusError):
    """A call failed with a gRPC status that retrying cannot fix."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


class Retry(Exception):
    """One attempt failed in a way worth another; ``why`` says how, for the final error."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def parse_seeds(seeds: str | Iterable[str]) -> list[str]:
    items = seeds.split(",") if isinstance(seeds, str) else list(seeds)
    parsed = [s.strip() for s in items if s.strip()]
    if not parsed:
        raise ValueError("at least one seed address (host:port) is needed")
    return parsed


def describe(error: grpc.RpcError | None) -> str:
    if error is None:
        return "no answer"
    details = error.details() if hasattr(error, "details") else ""
    return f"{error.code().name}: {details}"


@dataclass
class _Suspect:
    address: str
    epoch: int
    since: float


class Discovery:
    def __init__(
        self,
        seeds: list[str],
        *,
        per_seed_timeout: float = PER_SEED_TIMEOUT_S,
        security: ClientSecurity | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seeds = seeds
        self._per_seed = per_seed_timeout
        self._security = security  # TLS and token; None: the process default
        self._clock = clock
        self._channels: dict[str, grpc.Channel] = {}
        self._guard = threading.Lock()
        self._leader: str | None = None
        self._suspect: _Suspect | None = None
        self._relays: list[str] = []  # replicas that answered the last discovery
        self.max_epoch_seen = 0
        self._closed_rounds = 0  # consecutive rounds with every seed closing the socket
        #: Every "I am the leader" answer, as sent: (responder, epoch). For checkers.
        self.leader_claims: list[tuple[str, int]] = []

    def close(self) -> None:
        with self._guard:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    @property
    def security(self) -> ClientSecurity:
        """What this client presents: its own, else the process default."""
        return self._security or client_security.default()

    def stub(self, address: str) -> rpc.NimbusStub:
        with self._guard:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = make_channel(address, self._security)
        return rpc.NimbusStub(channel)

    # -- discovery ---------------------------------------------------------------------

    def find_leader(self, end: float) -> pb.GetLeaderAddressResponse:
        """The leader the newest term names; ``Retry`` when no current answer came."""
        replies = self._ask_all(
            lambda s, t: s.GetLeaderAddress.future(pb.GetLeaderAddressRequest(), timeout=t), end
        )
        self._note_claims(replies)
        current = [r for r in replies if r.epoch >= self.max_epoch_seen]
        if not current:
            self._leader = None
            raise Retry("no replica named a leader" if not replies else "only stale answers")
        best: pb.GetLeaderAddressResponse = max(current, key=lambda r: r.epoch)
        self._relays = [r.responder for r in replies if r.responder and r.epoch >= best.epoch]
        self.max_epoch_seen = max(self.max_epoch_seen, best.epoch)
        self._leader = best.replica_id
        return best

    def nimbuses(self, end: float) -> pb.GetAllNimbusAddressesResponse:
        """Every replica, as the answer of the newest term tells it."""
        replies = self._ask_all(lambda s, t: s.GetAllNimbusAddresses.future(
            pb.GetAllNimbusAddressesRequest(), timeout=t), end)  # fmt: skip
        fresh = [r for r in replies if r.leader_epoch >= self.max_epoch_seen]
        if not fresh:
            raise Retry("no replica answered with a current view")
        best: pb.GetAllNimbusAddressesResponse = max(fresh, key=lambda r: r.leader_epoch)
        self.max_epoch_seen = max(self.max_epoch_seen, best.leader_epoch)
        return best

    def newer_leader(self, epoch: int) -> pb.GetLeaderAddressResponse | None:
        """A replica that says it leads a term newer than ``epoch``, now the one to call."""
        try:
            replies = self._ask_all(
                lambda s, t: s.GetLeaderAddress.future(pb.GetLeaderAddressRequest(), timeout=t),
                self._clock() + self._per_seed,
            )
        except Retry:
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

    def _ask_all(self, ask: Callable[[rpc.NimbusStub, float], Any], end: float) -> list[Any]:
        """Ask every seed at once; the answers that arrive within the per-seed deadline.

        Returns early once a replica answers that it is the leader itself: its epoch is
        its own term, and waiting for a frozen seed would only add its timeout.
        """
        timeout = max(0.05, min(self._per_seed, end - self._clock()))
        finished: queue.Queue[tuple[str, Any]] = queue.Queue()
        calls: list[Any] = []
        for address in self._seeds():
            call = ask(self.stub(address), timeout)
            call.add_done_callback(lambda f, a=address: finished.put((a, f)))
            calls.append(call)
        replies: list[Any] = []
        errors: list[str] = []
        failures: list[tuple[str, grpc.RpcError]] = []
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
                    if e.code() in REFUSED:
                        raise
                    errors.append(f"{address}: {describe(e)}")
                    failures.append((address, e))
                if any(getattr(r, "responder_is_leader", False) for r in replies):
                    break
        finally:
            for call in calls:
                call.cancel()  # a no-op for those already done
        if not replies:
            if len(failures) == len(calls):
                self._check_tls(failures)
            raise Retry("no seed answered (" + "; ".join(errors or ["no answer"]) + ")")
        self._closed_rounds = 0
        return replies

    def _check_tls(self, failures: list[tuple[str, grpc.RpcError]]) -> None:
        """Raise ``TlsMismatchError`` when every seed failed with the same TLS mismatch."""
        tls_on = self.security.tls is not None
        seen = [tls_mismatch(e, tls_on=tls_on) for _, e in failures]
        kinds = {s[0] for s in seen if s is not None}
        if None in seen or len(kinds) != 1:
            self._closed_rounds = 0
            return
        mismatch, sign = next(s for s in seen if s is not None)
        if sign == "Socket closed":
            self._closed_rounds += 1
            if self._closed_rounds < CLOSED_ROUNDS:
                return
        raise TlsMismatchError(mismatch, [a for a, _ in failures], sign)

    def _seeds(self) -> list[str]:
        ordered = [self._leader] if self._leader else []
        return ordered + [s for s in self.seeds if s != self._leader]

    # -- routing -----------------------------------------------------------------------

    def route(self, end: float) -> tuple[str, Metadata]:
        """Where to send a leader-only call: the leader, or a follower asked to forward
        while the leader discovery names is one that just failed us."""
        if self._leader is not None:
            return self._leader, ()
        best = self.find_leader(end)
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
                raise Retry(f"the leader {best.replica_id} (epoch {best.epoch}) did not answer")
            return random.choice(relays), _FORWARD
        self._suspect = None
        return best.replica_id, ()

    def read_route(self, end: float) -> tuple[str, bool]:
        """Reads are served by any replica: a follower while the leader is suspect."""
        address, metadata = self.route(end)
        return address, bool(metadata)

    def failed(self, address: str, error: grpc.RpcError, *, relayed: bool) -> Exception:
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
            return Retry(f"{address} is not the leader ({error.details()})")
        if code in _RETRYABLE:
            self._leader = None
            if not relayed:
                self._suspect = _Suspect(address, self.max_epoch_seen, self._clock())
            return Retry(f"{address}: {describe(error)}")
        return NimbusCallError(describe(error), code)
