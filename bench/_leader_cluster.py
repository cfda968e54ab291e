"""bench/leader_failover.py's cluster: three replicas, ready when every one serves, lists
exactly the live set and names one leader; a replica that dies before it ever served is
started once more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import _replicas
from _common import BenchError, free_port
from _replicas import Bed, stop_all, tails

from cluster.api import pb

POLL_RPC_TIMEOUT_S = 0.5
READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.02


# -- replicas as processes --------------------------------------------------------------


@dataclass
class Replica(_replicas.Replica):
    attempt: int = 1
    ready: bool = False  # has been part of a ready cluster


@dataclass
class Cluster(Bed):
    """The bench's replicas: ``live`` ones take part; ``every`` one is cleaned up."""

    session_timeout: float
    live: list[Replica] = field(default_factory=list)
    every: list[Replica] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: tuple[str, ...] = ()  # more ``nimbus serve`` flags

    def start_replica(self, *, attempt: int = 1) -> Replica:
        """Start one replica on a fresh port (``wait_ready`` retries one that dies at once)."""
        port = free_port()
        log_path = self.log_path(port)
        replica = Replica(port, log_path, rpc_timeout=POLL_RPC_TIMEOUT_S, attempt=attempt)
        self.serve(replica, self.session_timeout, self.extra)
        self.every.append(replica)
        self.live.append(replica)
        return replica

    def _replace_failed_start(self, replica: Replica) -> Replica:
        """A replica that died before it ever served: once more on a new port, else fail."""
        self.notes.append(
            f"replica {replica.address} exited with {replica.returncode} before serving "
            f"(attempt {replica.attempt}): {replica.log_tail(3)!r}"
        )
        if replica.ready or replica.attempt >= 2:
            raise BenchError(
                f"replica {replica.address} exited with {replica.returncode}\n"
                f"{replica.log_tail(25)}"
            )
        self.remove(replica)
        return self.start_replica(attempt=replica.attempt + 1)

    def remove(self, replica: Replica) -> None:
        self.live.remove(replica)

    def by_address(self, address: str) -> Replica:
        for replica in self.live:
            if replica.address == address:
                return replica
        raise BenchError(f"the leader {address} is not one of the live replicas")

    def agreed_leader(self, replicas: list[Replica]) -> pb.GetLeaderAddressResponse | None:
        """The leader every given replica names identically, else None."""
        first: pb.GetLeaderAddressResponse | None = None
        for replica in replicas:
            reply = replica.leader_reply()
            if reply is None:
                return None
            if first is None:
                first = reply
            elif (reply.replica_id, reply.epoch) != (first.replica_id, first.epoch):
                return None
        return first

    def wait_ready(self, *, newer_than: int = 0) -> pb.GetLeaderAddressResponse:
        """Until every live replica serves, lists exactly the live set and names one leader."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for replica in list(self.live):
                if not replica.alive():
                    self._replace_failed_start(replica)
            expected = frozenset(r.address for r in self.live)
            if all(r.listening() and r.serving() for r in self.live) and all(
                r.registered() == expected for r in self.live
            ):
                leader = self.agreed_leader(self.live)
                if leader is not None and leader.epoch > newer_than:
                    if leader.replica_id not in expected:
                        raise BenchError(f"agreed leader {leader.replica_id} is not live")
                    for replica in self.live:
                        replica.ready = True
                    return leader
            time.sleep(READY_POLL_S)
        raise BenchError(
            f"the cluster did not become ready in {READY_TIMEOUT_S:.0f} s\n{self.tails()}"
        )

    def tails(self) -> str:
        return tails(self.live)

    def shutdown(self) -> None:
        stop_all(self.every, grace=10.0)
        self.live.clear()
