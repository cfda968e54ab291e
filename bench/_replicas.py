"""The servers a bench starts: ``nimbus serve`` replicas as child processes, ZooKeeper's version.

One replica is a process on a local port with its log file and a channel made on first use;
a ``Bed`` is where replicas serve (one ZooKeeper and root, one work folder), and a
``ReplicaCluster`` the replicas a bench started there, ready when each lists all of them and
all name one leader (and, where the bench says, each passes its own check). The process, the
calls every bench makes and the stopping are here once.

The calls answer None or False on any RPC error: a bench polls them until the cluster is as
it needs, and a replica that is down is one of the states it polls through.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

import grpc
from _common import REPO, BenchError, kept_on_failure, pdeathsig_prefix
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.api import pb, rpc
from cluster.factory import make_channel
from devtools.zkserver import ZooKeeperCluster, srvr

_SERVING = health_pb2.HealthCheckResponse.SERVING


def serve_command(
    *,
    zookeeper: str,
    root: str,
    listen: str,
    session_timeout: float,
    code_dir: Path,
    extra: Sequence[str] = (),
) -> list[str]:
    """``nimbus serve`` with the flags every bench gives; ``extra`` for the bench's own."""
    return [
        *pdeathsig_prefix(),
        sys.executable, "-m", "nimbus.cli", "serve",
        "--zookeeper", zookeeper, "--root", root,
        "--listen", listen,
        "--session-timeout", f"{session_timeout:g}",
        "--code-dir", str(code_dir),
        *extra,
    ]  # fmt: skip


@dataclass
class Replica:
    """One ``nimbus serve`` process on ``127.0.0.1:port``; ``launch`` (re)starts it."""

    port: int
    log_path: Path
    rpc_timeout: float = field(default=1.0, kw_only=True)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    started: float = field(default=0.0, init=False)  # time.monotonic() at launch
    log_offset: int = field(default=0, init=False)  # where this process's output begins
    _channel: grpc.Channel | None = field(default=None, init=False, repr=False)
    _listening: bool = field(default=False, init=False, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BenchError(f"replica {self.address} is not running")
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def launch(self, cmd: Sequence[str]) -> None:
        """Start the process, its output appended to the log; a fresh channel on next use."""
        if self.alive():
            raise BenchError(f"replica {self.address} is already running")
        self.close()
        self.log_offset = self.log_size()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        self.started = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Send ``signum`` if it runs, then ``wait_exit``."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code; None where it was still running after ``timeout`` and was killed."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def listening(self) -> bool:
        """Whether the gRPC port accepts connections yet (until the next ``launch``).

        Checked before the first call: a channel whose first connect is refused backs off
        for about a second (gRPC's default initial reconnect backoff), which would be
        counted as the replica's start-up time.
        """
        if not self._listening:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    self._listening = True
            except OSError:
                return False
        return True

    def channel(self) -> grpc.Channel:
        if self._channel is None:
            self._channel = make_channel(self.address)
        return self._channel

    def stub(self) -> rpc.NimbusStub:
        return rpc.NimbusStub(self.channel())

    def health_stub(self) -> health_pb2_grpc.HealthStub:
        return health_pb2_grpc.HealthStub(self.channel())

    def leader_reply(self, timeout: float | None = None) -> pb.GetLeaderAddressResponse | None:
        """What this replica says of the leader; None on error or when it names none."""
        try:
            reply: pb.GetLeaderAddressResponse = self.stub().GetLeaderAddress(
                pb.GetLeaderAddressRequest(), timeout=timeout or self.rpc_timeout
            )
        except grpc.RpcError:
            return None
        return reply if reply.replica_id else None

    def leader(self) -> tuple[str, int] | None:
        """(replica id, epoch) of the leader this replica names, None if none or on error."""
        reply = self.leader_reply()
        return None if reply is None else (reply.replica_id, reply.epoch)

    def registered(self, timeout: float | None = None) -> frozenset[str] | None:
        """The replicas this one lists in GetAllNimbusAddresses, None on error."""
        try:
            reply: pb.GetAllNimbusAddressesResponse = self.stub().GetAllNimbusAddresses(
                pb.GetAllNimbusAddressesRequest(), timeout=timeout or self.rpc_timeout
            )
        except grpc.RpcError:
            return None
        return frozenset(n.address for n in reply.nimbuses)

    def serving(self, timeout: float | None = None) -> bool:
        try:
            reply = self.health_stub().Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout or self.rpc_timeout
            )
        except grpc.RpcError:
            return False
        return bool(reply.status == _SERVING)

    def close(self) -> None:
        """Close the channel; the next call makes a new one."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self._listening = False

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the current process logged."""
        return "\n".join(self.log_since(self.log_offset).splitlines()[-lines:])


def raise_if_dead(replicas: Iterable[Replica]) -> None:
    """BenchError, with its log tail, for the first replica whose process has exited."""
    for replica in replicas:
        if not replica.alive():
            raise BenchError(
                f"replica {replica.address} exited with {replica.returncode}\n{replica.log_tail()}"
            )


def agreed_leader(replicas: Sequence[Replica]) -> tuple[str, int] | None:
    """(replica id, epoch) of the leader every replica names alike, if it is one of them."""
    named = {r.leader() for r in replicas}
    if len(named) != 1:
        return None
    (leader,) = named
    if leader is None or leader[0] not in {r.address for r in replicas}:
        return None
    return leader


def tails(replicas: Iterable[Replica]) -> str:
    """Every replica's log tail under its address, for a BenchError."""
    return "\n".join(f"--- {r.address}\n{r.log_tail()}" for r in replicas)


def stop_all(replicas: Sequence[Replica], grace: float) -> None:
    """SIGTERM every replica still running, SIGKILL whatever is left after ``grace``."""
    for replica in replicas:
        replica.close()
        if replica.alive() and replica.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                replica.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for replica in replicas:
        if replica.proc is None:
            continue
        try:
            replica.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            replica.proc.kill()
            replica.proc.wait()


@dataclass
class Bed:
    """Where a bench's replicas serve: one ZooKeeper and root, and a work folder holding each
    replica's log (``replica-<port>.log``) and code dir (``code-<port>``)."""

    zookeeper: str
    root: str
    workdir: Path

    def log_path(self, port: int) -> Path:
        return self.workdir / f"replica-{port}.log"

    def code_dir(self, port: int) -> Path:
        return self.workdir / f"code-{port}"

    def serve(self, replica: Replica, session_timeout: float, extra: Sequence[str] = ()) -> None:
        """(Re)start ``replica`` as ``nimbus serve`` here, with ``extra`` flags."""
        replica.launch(
            serve_command(
                zookeeper=self.zookeeper,
                root=self.root,
                listen=replica.address,
                session_timeout=session_timeout,
                code_dir=self.code_dir(replica.port),
                extra=extra,
            )
        )


R = TypeVar("R", bound=Replica)


@dataclass
class ReplicaCluster(Bed, Generic[R]):
    """The replicas a bench started on a bed, stopped together."""

    ready_timeout_s: ClassVar[float] = 60.0
    ready_poll_s: ClassVar[float] = 0.05
    stop_grace_s: ClassVar[float] = 10.0

    replicas: list[R] = field(default_factory=list)

    def by_address(self, address: str) -> R:
        for replica in self.replicas:
            if replica.address == address:
                return replica
        raise BenchError(f"{address} is not one of the bench's replicas")

    def passes(self, replica: R) -> bool:
        """The bench's own check of one replica for ``wait_ready``; none here."""
        return True

    def wait_ready(self) -> tuple[R, int]:
        """Until every replica listens, ``passes``, lists all of them and all name one
        leader; (that leader, its epoch)."""
        expected = frozenset(r.address for r in self.replicas)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            raise_if_dead(self.replicas)
            if (
                all(r.listening() for r in self.replicas)
                and all(self.passes(r) for r in self.replicas)
                and all(r.registered() == expected for r in self.replicas)
            ):
                leader = agreed_leader(self.replicas)
                if leader is not None:
                    return self.by_address(leader[0]), leader[1]
            time.sleep(self.ready_poll_s)
        raise BenchError(
            f"the replicas were not ready in {self.ready_timeout_s:.0f} s\n{self.tails()}"
        )

    def tails(self) -> str:
        return tails(self.replicas)

    def shutdown(self) -> None:
        stop_all(self.replicas, grace=self.stop_grace_s)


@contextmanager
def fresh_bed(bench: str) -> Iterator[tuple[Bed, str]]:
    """For one run of ``bench/<bench>.py``: a standalone ZooKeeper with a fresh root, the bed
    its replicas serve on (the work folder kept, and named on stderr, when the run fails),
    and the server's version."""
    with (
        kept_on_failure(f"nimbus-bench-{bench}-", f"{bench}.py") as workdir,
        ZooKeeperCluster(size=1) as zk,
    ):
        root = f"/bench-{uuid.uuid4().hex[:12]}"
        yield Bed(zk.connect_string, root, workdir), zookeeper_version(zk.client_ports[0])


def zookeeper_version(port: int) -> str:
    """The server's version from the ``srvr`` four-letter word, e.g. ``3.9.3``."""
    for line in (srvr(port, timeout=5.0) or "").splitlines():
        if line.startswith("Zookeeper version:"):
            return line.partition(":")[2].split("-")[0].split(",")[0].strip()
    return "unknown"
