"""Nimbus replicas as real processes (``nimbus serve``) for integration and chaos tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.api import pb, rpc
from cluster.factory import make_channel
from devtools.zklocate import free_ports
from tests.processes import REPO as REPO
from tests.processes import stop_process
from tests.waiting import wait_until


def free_port() -> int:
    return free_ports(1)[0]


class Replica:
    def __init__(
        self,
        zookeeper: str,
        root: str,
        workdir: Path,
        *,
        session_timeout: float = 2.0,
        port: int | None = None,
        code_dir: Path | None = None,
        extra: tuple[str, ...] = (),
        entry: str = "nimbus.cli",
        env: dict[str, str] | None = None,
    ) -> None:
        self.extra = extra
        self.entry = entry  # the module run with -m: the CLI, or a wrapper that injects faults
        self.env = env
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.zookeeper = zookeeper
        self.root = root
        self.session_timeout = session_timeout
        self.code_dir = code_dir or workdir / f"code-{self.port}"
        self.log_path = workdir / f"replica-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._channel: grpc.Channel | None = None

    def start(self) -> Replica:
        cmd = [
            sys.executable, "-m", self.entry, "serve",
            "--zookeeper", self.zookeeper, "--root", self.root,
            "--listen", self.address, "--session-timeout", str(self.session_timeout),
            "--code-dir", str(self.code_dir), *self.extra,
        ]  # fmt: skip
        env = None if self.env is None else {**os.environ, **self.env}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def send(self, signum: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signum)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP for the block, SIGCONT after it however the block ends."""
        self.send(signal.SIGSTOP)
        try:
            yield
        finally:
            self.send(signal.SIGCONT)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc is None:
            return 0
        code = stop_process(self.proc, timeout, signum)
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        return code

    def channel(self) -> grpc.Channel:
        if self._channel is None:
            self._channel = make_channel(self.address)
        return self._channel

    def stub(self) -> rpc.NimbusStub:
        return rpc.NimbusStub(self.channel())

    def leader_reply(self, timeout: float = 2.0) -> pb.GetLeaderAddressResponse | None:
        """This replica's answer to GetLeaderAddress, None when it has none."""
        try:
            reply: pb.GetLeaderAddressResponse = self.stub().GetLeaderAddress(
                pb.GetLeaderAddressRequest(), timeout=timeout
            )
        except grpc.RpcError:
            return None
        return reply

    def health(self, service: str = "", timeout: float = 2.0) -> str:
        stub = health_pb2_grpc.HealthStub(self.channel())
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as e:
            return f"error:{e.code().name}"
        name: str = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return name

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def agreed_leader(replicas: list[Replica]) -> pb.GetLeaderAddressResponse | None:
    """The leader every given replica names identically, else None."""
    replies = [r.leader_reply() for r in replicas]
    if any(reply is None for reply in replies):
        return None
    first = replies[0]
    assert first is not None
    same = all(
        reply is not None and (reply.replica_id, reply.epoch) == (first.replica_id, first.epoch)
        for reply in replies
    )
    return first if same else None


def wait_for_agreed_leader(
    replicas: list[Replica], timeout: float, *, newer_than: int = 0
) -> pb.GetLeaderAddressResponse:
    found: list[pb.GetLeaderAddressResponse] = []

    def check() -> bool:
        leader = agreed_leader(replicas)
        if leader is not None and leader.epoch > newer_than:
            found.append(leader)
            return True
        return False

    try:
        wait_until(check, timeout=timeout, message="an agreed leader")
    except AssertionError as e:
        logs = "\n".join(f"--- {r.address}\n{r.log_tail()}" for r in replicas)
        raise AssertionError(f"{e}\n{logs}") from None
    return found[-1]


def failover_while_paused(
    leader: Replica, replicas: list[Replica], *, epoch: int, timeout: float
) -> tuple[pb.GetLeaderAddressResponse, float]:
    """Pause ``leader`` until the other replicas agree on a leader of a term newer than
    ``epoch``; that leader's reply, and the seconds from the SIGSTOP until it was seen."""
    rest = [r for r in replicas if r is not leader]
    paused_at = time.monotonic()
    with leader.paused():
        new = wait_for_agreed_leader(rest, timeout=timeout, newer_than=epoch)
        return new, time.monotonic() - paused_at
