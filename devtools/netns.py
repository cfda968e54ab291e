"""Kernel-made network faults: one network namespace per replica, iptables inside it.

Every replica runs in its own namespace, joined to a bridge in the root namespace by a
veth pair; clients (the ``nimbus`` CLI) and ZooKeeper stay in the root namespace, which
reaches the replicas through the bridge address. A fault is a set of iptables rules in the
victim's namespace, so it is the kernel that drops packets: no proxy in the path resets or
buffers anything, and a heal only removes the rules, leaving half-open connections to
recover (or not) as they would in a real network.

Needs root, ``ip`` (iproute2) and ``iptables``; ``available()`` says whether this machine can.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class NetnsError(RuntimeError):
    """A namespace, link or rule could not be made or removed."""


class Cut(enum.Enum):
    """What a fault drops, seen from the victim replica."""

    ZOOKEEPER_BOTH = "zookeeper both ways"
    ZOOKEEPER_OUT = "replica to zookeeper"
    ZOOKEEPER_IN = "zookeeper to replica"
    ISOLATED = "everything"
    CLIENTS = "clients to replica"
    #: Connections from one peer to the replica's gRPC port answered with a TCP reset,
    #: as if nothing listened: the false positive of the successor's preemption probe.
    REFUSE_PEER = "peer refused"
    #: ``REFUSE_PEER`` for every other replica at once (a NetworkPolicy that lets clients
    #: in but not the other replicas): they cannot pull code from this replica, forward to
    #: it or probe it, while its own connections to them, clients and ZooKeeper pass.
    REFUSE_PEERS = "peers refused"
    #: The replica cannot reach any other replica's gRPC port (code downloads, forwarding,
    #: probes), while clients and ZooKeeper still reach it.
    PEERS_GRPC = "gRPC to peers"


def available(*, cgroups: bool = False) -> str | None:
    """None when kernel faults can be made here, else why not.

    ``cgroups``: also a whole cut of a process from its peers (``LoopbackPortCut`` with an
    owner), which needs a writable cgroup v2 hierarchy and ``ss``.
    """
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "iptables", *(("ss",) if cgroups else ())):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install iproute2 iptables)"
    if cgroups and _cgroup2_mount() is None:
        return "no cgroup v2 hierarchy mounted"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


@dataclass(frozen=True)
class Host:
    """One replica's namespace and address on the bridge."""

    namespace: str
    address: str

    def prefix(self) -> list[str]:
        """Prepend to a command to run it inside this namespace."""
        return ["ip", "netns", "exec", self.namespace]

    def iptables(self, *rule: str) -> None:
        _run(*self.prefix(), "iptables", "-w", *rule)


class KernelNet:
    """A bridge and ``count`` namespaces: ``hosts[i]`` is replica ``i``'s.

    ``gateway`` is the root namespace's address on the bridge: where clients come from,
    and where a replica reaches ZooKeeper (through a forwarder listening there).
    """

    def __init__(self, count: int, *, subnet: str = "10.77.0") -> None:
        tag = uuid.uuid4().hex[:6]
        self.bridge = f"nbr{tag}"
        self.gateway = f"{subnet}.1"
        self.hosts = [Host(f"nimbus-{tag}-{i}", f"{subnet}.{10 + i}") for i in range(count)]
        self._veths = [f"nv{tag}{i}" for i in range(count)]

    def __enter__(self) -> KernelNet:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def setup(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for host, veth in zip(self.hosts, self._veths, strict=True):
            _run("ip", "netns", "add", host.namespace)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
                 "netns", host.namespace)  # fmt: skip
            _run("ip", "link", "set", veth, "master", self.bridge)
            _run("ip", "link", "set", veth, "up")
            _run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _run("ip", "-n", host.namespace, "link", "set", "eth0", "up")
            _run("ip", "-n", host.namespace, "link", "set", "lo", "up")

    def teardown(self) -> None:
        for host, veth in zip(self.hosts, self._veths, strict=True):
            subprocess.run(["ip", "link", "del", veth], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)

    # -- faults ------------------------------------------------------------------------

    def cut(
        self, i: int, what: Cut, *, zookeeper_port: int, grpc_port: int = 0, peer: int = -1
    ) -> None:
        """Drop what ``what`` names in replica ``i``'s namespace until ``heal(i)``."""
        host = self.hosts[i]
        zk = ("-p", "tcp")
        rules: list[Sequence[str]] = []
        if what in (Cut.ZOOKEEPER_BOTH, Cut.ZOOKEEPER_OUT):
            rules.append(("OUTPUT", "-d", self.gateway, *zk, "--dport", str(zookeeper_port)))
        if what in (Cut.ZOOKEEPER_BOTH, Cut.ZOOKEEPER_IN):
            rules.append(("INPUT", "-s", self.gateway, *zk, "--sport", str(zookeeper_port)))
        if what is Cut.ISOLATED:
            rules += [("INPUT", "-i", "eth0"), ("OUTPUT", "-o", "eth0")]
        if what is Cut.CLIENTS:
            if not grpc_port:
                raise ValueError("cutting clients needs the replica's gRPC port")
            rules.append(("INPUT", "-s", self.gateway, "-p", "tcp", "--dport", str(grpc_port)))
        if what is Cut.PEERS_GRPC:
            if not grpc_port:
                raise ValueError("cutting the peers' gRPC needs the gRPC port")
            subnet = f"{self.gateway.rsplit('.', 1)[0]}.0/24"
            rules.append(("OUTPUT", "-o", "eth0", "-d", subnet, "-p", "tcp",
                          "--dport", str(grpc_port)))  # fmt: skip
        for rule in rules:
            host.iptables("-A", *rule, "-j", "DROP")
        if what is Cut.REFUSE_PEER:
            if peer < 0 or not grpc_port:
                raise ValueError("refusing a peer needs its index and the gRPC port")
            self._refuse(host, self.hosts[peer].address, grpc_port)
        if what is Cut.REFUSE_PEERS:
            if not grpc_port:
                raise ValueError("refusing the peers needs the gRPC port")
            for other in self.hosts:
                if other is not host:
                    self._refuse(host, other.address, grpc_port)

    @staticmethod
    def _refuse(host: Host, source: str, grpc_port: int) -> None:
        """Answer ``source``'s connections to ``host``'s gRPC port with a TCP reset."""
        host.iptables("-A", "INPUT", "-s", source, "-p", "tcp", "--dport", str(grpc_port),
                      "-j", "REJECT", "--reject-with", "tcp-reset")  # fmt: skip

    def heal(self, i: int) -> None:
        """Remove every rule in replica ``i``'s namespace (connections are left as they are)."""
        self.hosts[i].iptables("-F")

    def heal_all(self) -> None:
        for i in range(len(self.hosts)):
            self.heal(i)


class LoopbackPortCut:
    """Drop every loopback TCP segment to or from some ports, in a chain of its own.

    Used to cut a ZooKeeper server's quorum and election ports (its peers' links to it)
    while its client port keeps serving: the ensemble's servers all listen on 127.0.0.1.

    By its own ports alone the cut is partial: the connections the server opens to its
    peers' ports (a follower's link to its leader, its own election links) stay up, and a
    follower so cut stays in the quorum. ``owner`` (the server's pid) and ``peer_ports``
    make the cut whole: the process goes into a cgroup of its own whose sockets may send
    nothing to those ports (its new connections), and the connections it already has to
    them, opened before, are dropped by their port pairs both ways.
    """

    def __init__(
        self, ports: list[int], *, owner: int | None = None, peer_ports: Sequence[int] = ()
    ) -> None:
        if owner is not None and not peer_ports:
            raise ValueError("cutting a process from its peers needs the peers' ports")
        self._ports = ports
        self._owner = owner
        self._peer_ports = list(peer_ports)
        self._chain = f"NIMBUS-CUT-{uuid.uuid4().hex[:6]}"
        self._cgroup: _Cgroup | None = None
        self._on = False

    def cut(self) -> None:
        rules: list[tuple[str, ...]] = [
            ("-p", "tcp", match, str(port))
            for port in self._ports
            for match in ("--dport", "--sport")
        ]
        _run("iptables", "-w", "-N", self._chain)
        self._on = True
        try:
            if self._owner is not None:
                # Into the cgroup first: a socket made after the listing is then in it.
                self._cgroup = _Cgroup(self._chain.lower(), self._owner)
                path = ("-m", "cgroup", "--path", self._cgroup.path)
                rules += [(*path, "-p", "tcp", "--dport", str(p)) for p in self._peer_ports]
                for local, remote in _connections(self._owner, self._peer_ports):
                    rules.append(("-p", "tcp", "--sport", str(local), "--dport", str(remote)))
                    rules.append(("-p", "tcp", "--sport", str(remote), "--dport", str(local)))
            for rule in rules:
                _run("iptables", "-w", "-A", self._chain, *rule, "-j", "DROP")
            _run("iptables", "-w", "-I", "OUTPUT", "-o", "lo", "-j", self._chain)
        except BaseException:
            self.heal()
            raise

    def heal(self) -> None:
        if not self._on:
            return
        # No jump to remove when cut() failed before adding it.
        jump = ["iptables", "-w", "-D", "OUTPUT", "-o", "lo", "-j", self._chain]
        subprocess.run(jump, capture_output=True, check=False, timeout=30)
        _run("iptables", "-w", "-F", self._chain)
        _run("iptables", "-w", "-X", self._chain)
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        self._on = False


def _cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


class _Cgroup:
    """A cgroup v2 child of ``pid``'s own, holding ``pid`` until :meth:`remove`."""

    def __init__(self, name: str, pid: int) -> None:
        mount = _cgroup2_mount()
        if mount is None:
            raise NetnsError("no cgroup v2 hierarchy mounted")
        own = Path(f"/proc/{pid}/cgroup").read_text().split("0::", 1)[1].splitlines()[0]
        self._home = mount / own.lstrip("/")
        self.path = f"{own.strip('/')}/{name}".lstrip("/")  # as iptables names it
        self._dir = mount / self.path
        self._pid = pid
        try:
            self._dir.mkdir()
            (self._dir / "cgroup.procs").write_text(str(pid))
        except OSError as e:
            raise NetnsError(f"cgroup {self._dir}: {e}") from e

    def remove(self) -> None:
        """Move the process back (if it still runs) and remove the cgroup."""
        if (self._dir / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                (self._home / "cgroup.procs").write_text(str(self._pid))
        self._dir.rmdir()


def _connections(pid: int, remote_ports: Sequence[int]) -> list[tuple[int, int]]:
    """(local port, remote port) of ``pid``'s TCP connections to any of ``remote_ports``."""
    listing = subprocess.run(
        ["ss", "-Htanp"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    found = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 6 or f"pid={pid}," not in line:
            continue
        local, remote = (f.rsplit(":", 1)[1] for f in fields[3:5])
        if remote.isdigit() and int(remote) in remote_ports:
            found.append((int(local), int(remote)))
    return found
