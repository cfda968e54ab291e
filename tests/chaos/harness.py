"""A chaos cluster: three ``nimbus serve`` processes whose every link the harness controls.

Each replica reaches each ZooKeeper node only through its own :class:`FaultProxy`
(one ``ProxiedEnsemble`` per replica), and clients and peers reach its gRPC port only
through a front proxy whose address the replica advertises, so redirects, discovery and
code downloads all travel the link the nemesis can cut. The harness itself observes the
replicas on their listen ports directly, past the proxies, so watching never depends on
the fault being injected.
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient

from cluster.api import pb
from cluster.errors import ZooKeeperStartError, ZooKeeperUnavailableError
from cluster.factory import make_kazoo_client
from devtools.faultproxy import FaultProxy, ProxiedEnsemble
from devtools.zkserver import ZooKeeperCluster
from tests.chaos.loops import Loops
from tests.cluster import Replica, free_port
from tests.replica_fixtures import sync_flags
from tests.waiting import wait_until

ROOT = "/storm"
MIN_REPLICAS = 2


@dataclass
class Node:
    """One replica and the links in front of it."""

    index: int
    replica: Replica
    zk_links: ProxiedEnsemble
    front: FaultProxy
    tmpfs: Path | None = None  # its code dir, when mounted as a small tmpfs

    @property
    def address(self) -> str:
        """The replica id: the front proxy's address, which the replica advertises."""
        return self.front.address

    @property
    def code_dir(self) -> Path:
        return self.replica.code_dir

    def alive(self) -> bool:
        proc = self.replica.proc
        return proc is not None and proc.poll() is None


@dataclass
class LeaderView:
    index: int
    epoch: int


@dataclass
class ChaosCluster:
    """Three replicas on one chroot of ``zk``; start with :meth:`start`, end with :meth:`stop`."""

    zk: ZooKeeperCluster
    workdir: Path
    chroot: str
    session_timeout: float = 2.0
    replicas: int = 3
    tmpfs_code_dirs: bool = False
    nodes: list[Node] = field(default_factory=list)
    _admin: KazooClient | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> ChaosCluster:
        admin = make_kazoo_client(self.zk.connect_string, session_timeout=10.0)
        admin.start(timeout=30)
        admin.ensure_path(self.chroot)
        admin.stop()
        admin.close()
        for i in range(self.replicas):
            zk_links = ProxiedEnsemble(self.zk.connect_string).start()
            port = free_port()
            front = FaultProxy("127.0.0.1", port).start()
            code_dir = self.workdir / f"code-{i}"
            tmpfs = self._mount_tmpfs(code_dir) if self.tmpfs_code_dirs else None
            replica = Replica(
                f"{zk_links.connect_string}{self.chroot}",
                ROOT,
                self.workdir,
                session_timeout=self.session_timeout,
                port=port,
                code_dir=code_dir,
                extra=(
                    *sync_flags(min_replicas=MIN_REPLICAS, replication_wait=10),
                    "--advertise",
                    front.address,
                ),
                # The real CLI, its kazoo loop made to die on demand (the kazoo-loop fault).
                entry="tests.procs.zk_loop_dies",
                env={"NIMBUS_TEST_LOOP_TRIGGER": str(self.loop_trigger(i))},
            )
            self.nodes.append(Node(i, replica, zk_links, front, tmpfs))
        for node in self.nodes:
            node.replica.start()
        self.wait_healthy(timeout)
        return self

    def loop_trigger(self, i: int) -> Path:
        """The file whose existence makes replica ``i``'s kazoo connection loop die."""
        return self.workdir / f"kill-kazoo-loop-{i}"

    def stop_replicas(self) -> None:
        """SIGKILL every replica, keep everything else: the state stays still for checks."""
        for node in self.nodes:
            node.replica.stop(signal.SIGKILL)

    def stop(self) -> None:
        self.stop_replicas()
        for node in self.nodes:
            node.front.stop()
            node.zk_links.stop()
            if node.tmpfs is not None:
                subprocess.run(["umount", "-l", str(node.tmpfs)], check=False)
        if self._admin is not None:
            self._admin.stop()
            self._admin.close()
            self._admin = None

    @staticmethod
    def _mount_tmpfs(path: Path) -> Path:
        """A small filesystem of its own, so the nemesis can fill it (needs root)."""
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(path)],
            check=True,
            capture_output=True,
        )
        return path

    # -- observation (direct, past the proxies) -----------------------------------------

    @property
    def seeds(self) -> list[str]:
        """What clients are given: the front proxies."""
        return [n.address for n in self.nodes]

    def admin(self) -> KazooClient:
        """A plain client on the chroot, straight to the ensemble: for checkers only."""
        if self._admin is None:
            client = make_kazoo_client(
                f"{self.zk.connect_string}{self.chroot}", session_timeout=10.0
            )
            client.start(timeout=30)
            self._admin = client
        return self._admin

    def index_of(self, address: str) -> int | None:
        for node in self.nodes:
            if node.address == address:
                return node.index
        return None

    def reply(self, i: int, timeout: float = 0.5) -> pb.GetLeaderAddressResponse | None:
        node = self.nodes[i]
        if not node.alive():
            return None
        return node.replica.leader_reply(timeout=timeout)

    def agreed_leader(self) -> LeaderView | None:
        """The leader every live replica names, with the same epoch, and who says so itself."""
        replies = [self.reply(n.index) for n in self.nodes]
        if any(r is None for r in replies):
            return None
        named = {(r.replica_id, r.epoch) for r in replies if r is not None}
        if len(named) != 1:
            return None
        address, epoch = named.pop()
        index = self.index_of(address)
        if index is None:
            return None
        own = replies[index]
        if own is None or not own.responder_is_leader:
            return None
        return LeaderView(index, epoch)

    def wait_leader(self, timeout: float) -> LeaderView:
        found = wait_until(self.agreed_leader, timeout=timeout, message="an agreed leader")
        assert found is not None
        return found

    def wait_healthy(self, timeout: float) -> LeaderView:
        """Every replica up and connected, one agreed leader."""

        def healthy() -> LeaderView | None:
            if not all(n.alive() and n.replica.health("", 0.5) == "SERVING" for n in self.nodes):
                return None
            return self.agreed_leader()

        try:
            found = wait_until(healthy, timeout=timeout, interval=0.05, message="a healthy cluster")
            assert found is not None
            return found
        except AssertionError as e:
            logs = "\n".join(f"--- replica {n.index}\n{n.replica.log_tail(15)}" for n in self.nodes)
            raise AssertionError(f"{e}\n{logs}") from None

    # -- faults on replicas ---------------------------------------------------------------

    def kill(self, i: int, signum: int = signal.SIGKILL) -> None:
        """Signal and reap; the old session lives on in ZooKeeper (SIGKILL) or is closed."""
        self.nodes[i].replica.stop(signum)

    def restart(self, i: int) -> None:
        self.nodes[i].replica.start()

    def pause(self, i: int) -> None:
        self.nodes[i].replica.send(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.nodes[i].replica.send(signal.SIGCONT)

    # -- faults on links ------------------------------------------------------------------

    def cut_zookeeper(self, i: int, direction: str) -> None:
        """``upstream``: replica -> ZooKeeper lost; ``downstream``: ZooKeeper -> replica."""
        self.nodes[i].zk_links.blackhole(direction)  # type: ignore[arg-type]

    def heal_zookeeper(self, i: int) -> None:
        """Forward again and reset the torn connections, as a TCP timeout would."""
        links = self.nodes[i].zk_links
        links.pass_through()
        links.reset()

    def cut_front(self, i: int) -> None:
        self.nodes[i].front.blackhole("both")

    def heal_front(self, i: int) -> None:
        self.nodes[i].front.pass_through()
        self.nodes[i].front.reset()

    def zk_node_of(self, i: int) -> int | None:
        """The ZooKeeper node replica ``i`` is connected to now (through its proxies)."""
        for j, proxy in enumerate(self.nodes[i].zk_links):
            if proxy.connection_count:
                return j
        return None

    def heal_all(self, timeout: float = 60.0) -> None:
        """Undo every fault: links forward, processes run, the ensemble whole."""
        for node in self.nodes:
            node.zk_links.pass_through()
            node.front.pass_through()
            if node.alive():
                with contextlib.suppress(ProcessLookupError):
                    node.replica.send(signal.SIGCONT)
            else:
                node.replica.start()
        for attempt in range(3):  # a JVM that dies while starting (seen: SIGSEGV) gets retried
            try:
                self.zk.heal(timeout)
                return
            except (ZooKeeperStartError, ZooKeeperUnavailableError):
                if attempt == 2:
                    raise


def verified_copies(code_dirs: list[Path], digest: str) -> list[int]:
    """Indexes of the stores holding a file that hashes to ``digest`` (S3's ground truth)."""
    held = []
    for i, code_dir in enumerate(code_dirs):
        try:
            if hashlib.sha256((code_dir / digest).read_bytes()).hexdigest() == digest:
                held.append(i)
        except OSError:
            continue
    return held


class LeadershipSampler(Loops):
    """Samples who claims leadership, per replica: the split-brain checker's evidence."""

    def __init__(self, cluster: ChaosCluster, t0: float, interval: float = 0.2) -> None:
        indexes = [n.index for n in cluster.nodes]
        super().__init__(self._run, indexes, name="leadership-sampler", join_s=5)
        self._cluster = cluster
        self._t0 = t0
        self._interval = interval
        # (sent, received, replica, epoch) for each answer "I lead, in that epoch".
        self.samples: list[tuple[float, float, int, int]] = []
        self._lock = threading.Lock()

    def _run(self, i: int) -> None:
        while not self.stopping.wait(self._interval):
            sent = time.monotonic() - self._t0
            try:
                reply = self._cluster.reply(i, timeout=1.0)
            except ValueError:  # its channel was closed by a restart: ask again next turn
                continue
            if reply is not None and reply.responder_is_leader:
                received = time.monotonic() - self._t0
                with self._lock:
                    self.samples.append((sent, received, i, int(reply.epoch)))
