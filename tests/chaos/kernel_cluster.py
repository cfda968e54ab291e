"""Three ``nimbus serve`` replicas, each in its own network namespace, for kernel faults.

ZooKeeper and clients stay in the root namespace. A replica reaches ZooKeeper through a
plain forwarder on the bridge address (ZooKeeper listens on loopback only), so the
kernel rules in a replica's namespace (``devtools.netns``) decide what gets through; the
forwarder itself never injects anything. Clients reach the replicas on their bridge
addresses, exactly as a user's CLI reaches pods.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import grpc
from kazoo.client import KazooClient

from cluster.api import pb, rpc
from cluster.factory import make_kazoo_client
from devtools.faultproxy import FaultProxy
from devtools.netns import Cut, KernelNet
from devtools.zkserver import ZooKeeperCluster
from tests.cluster import REPO
from tests.waiting import wait_until

ROOT = "/storm"
GRPC_PORT = 6627


class ClaimSample(NamedTuple):
    """A replica's answer as leader: when it was asked, when it answered, which epoch."""

    sent: float
    received: float
    replica: int
    epoch: int


@dataclass
class KernelReplica:
    index: int
    address: str
    prefix: list[str]
    code_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class KernelCluster:
    """Start with :meth:`start`, end with :meth:`stop` (also on failure)."""

    workdir: Path
    session_timeout: float = 4.0
    count: int = 3
    extra: tuple[str, ...] = ()
    replicas: list[KernelReplica] = field(default_factory=list)
    subnet: str = "10.77.0"  # the bridge's /24: another for a run beside one on this

    def start(self, timeout: float = 90.0) -> KernelCluster:
        self._admin: KazooClient | None = None
        self.net = KernelNet(self.count, subnet=self.subnet)
        self.zookeeper_hosts = self.start_zookeeper_and_net()
        for i, host in enumerate(self.net.hosts):
            replica = KernelReplica(
                i,
                f"{host.address}:{GRPC_PORT}",
                host.prefix(),
                self.workdir / f"code-{i}",
                self.workdir / f"replica-{i}.log",
            )
            self.replicas.append(replica)
            self.spawn(i)
        self.wait_healthy(timeout)
        return self

    def stop(self) -> None:
        for replica in self.replicas:
            if replica.alive():
                assert replica.proc is not None
                replica.proc.send_signal(signal.SIGCONT)
                replica.proc.kill()
                replica.proc.wait(10)
        if self._admin is not None:
            self._admin.stop()
            self._admin.close()
        self.stop_zookeeper_and_net()

    def start_zookeeper_and_net(self) -> str:
        """Start ZooKeeper and the namespaces; return the connect string replicas are given.

        Here one server on loopback, reached through a forwarder on the bridge address.
        """
        self.zk = ZooKeeperCluster(size=1, base_dir=self.workdir / "zk").start()
        self.net.setup()
        zk_port = int(self.zk.connect_string.split(",")[0].rsplit(":", 1)[1])
        self.forwarder = FaultProxy("127.0.0.1", zk_port, listen_host=self.net.gateway).start()
        return self.forwarder.address

    def stop_zookeeper_and_net(self) -> None:
        self.forwarder.stop()
        self.net.teardown()
        self.zk.stop()

    @property
    def seeds(self) -> str:
        return ",".join(r.address for r in self.replicas)

    @property
    def zookeeper_port(self) -> int:
        return self.forwarder.port

    def spawn(self, i: int) -> None:
        replica = self.replicas[i]
        cmd = [
            *replica.prefix, sys.executable, "-m", "nimbus.cli", "serve",
            "--zookeeper", self.zookeeper_hosts, "--root", ROOT,
            "--listen", replica.address, "--session-timeout", str(self.session_timeout),
            "--code-dir", str(replica.code_dir), *self.extra,
        ]  # fmt: skip
        with replica.log_path.open("ab") as log:
            replica.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def signal(self, i: int, signum: int) -> None:
        proc = self.replicas[i].proc
        assert proc is not None
        proc.send_signal(signum)

    def kill(self, i: int, signum: int) -> None:
        """Send ``signum`` and wait for the process to end."""
        self.signal(i, signum)
        proc = self.replicas[i].proc
        assert proc is not None
        proc.wait(60)

    def cut(self, i: int, what: Cut, *, peer: int = -1) -> None:
        self.net.cut(i, what, zookeeper_port=self.zookeeper_port, grpc_port=GRPC_PORT, peer=peer)

    def successor(self) -> int:
        """The replica next in the lock queue after the leader's node."""
        admin = self.admin()
        folder = f"{ROOT}/leader-lock"

        def queued() -> list[str]:  # a replica may still be on its way into the queue
            return sorted(admin.get_children(folder), key=lambda name: name[-10:])

        queue = wait_until(lambda: len(q := queued()) >= 2 and q, timeout=30,
                           message="a second replica in the lock queue")  # fmt: skip
        assert isinstance(queue, list)
        owner = admin.get(f"{folder}/{queue[1]}")[0].decode()
        return next(r.index for r in self.replicas if r.address == owner)

    def heal(self, i: int) -> None:
        self.net.heal(i)

    # -- observation (past any fault: the harness asks each replica directly) -----------

    def admin(self) -> KazooClient:
        if self._admin is None:
            self._admin = make_kazoo_client(self.zk.connect_string, session_timeout=10.0)
            self._admin.start(timeout=30)
        return self._admin

    def claims(self) -> dict[int, int]:
        """Replica index -> epoch, for every replica that answers as the leader now."""
        return {replica: epoch for _s, _r, replica, epoch in self.claim_samples()}

    def claim_samples(self) -> list[ClaimSample]:
        """One (sent, received, replica, epoch) per replica answering as the leader, each
        timed on its own: the replicas are asked one after another, so a poll is a span,
        not an instant, and only these times order one replica's answer after another's."""
        found: list[ClaimSample] = []
        for replica in self.replicas:
            if not replica.alive():
                continue
            with grpc.insecure_channel(replica.address) as channel:
                sent = time.monotonic()
                try:
                    reply = rpc.NimbusStub(channel).GetLeaderAddress(
                        pb.GetLeaderAddressRequest(), timeout=0.5
                    )
                except grpc.RpcError:
                    continue
                received = time.monotonic()
            if reply.responder_is_leader:
                found.append(ClaimSample(sent, received, replica.index, int(reply.epoch)))
        return found

    def leader(self) -> tuple[int, int] | None:
        """(index, epoch) of the one replica answering as leader, when exactly one does."""
        claims = self.claims()
        if len(claims) != 1:
            return None
        return next(iter(claims.items()))

    def wait_healthy(self, timeout: float) -> tuple[int, int]:
        """Every replica up and one leader."""

        def healthy() -> tuple[int, int] | None:
            if not all(r.alive() for r in self.replicas):
                return None
            return self.leader()

        found = wait_until(healthy, timeout=timeout, interval=0.1, message="a healthy cluster")
        assert found is not None
        return found
