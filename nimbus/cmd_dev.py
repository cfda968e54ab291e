"""``nimbus dev``: the embedded default, a whole cluster on this machine in one command.

Starts a ZooKeeper (standalone, or ``--ensemble 3``), ``--replicas`` Nimbus replicas and
``--supervisors`` supervisors as separate processes on loopback, prints one line per
process, and stops them all cleanly on Ctrl-C or SIGTERM. ``--demo`` is the README's
main job: submit an example topology, show the leader and the running topology, SIGKILL
the leader, show the new leader, its epoch and the topology still ACTIVE, stop, exit 0.
"""

from __future__ import annotations

import argparse
import hashlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from code_sync.package import make_package
from leader.client import NimbusClient
from nimbus.api import pb, records
from nimbus.errors import NimbusError
from nimbus.zkserver import ZooKeeperCluster, free_ports

EXAMPLE_TOPOLOGY = b'''"""Example package made by `nimbus dev --demo`."""


def build():
    # The pipelines issue defines the spout/bolt API this returns.
    return None
'''


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dev", aliases=["local"], help="run ZooKeeper, replicas and supervisors on this machine"
    )
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--supervisors", type=int, default=1)
    p.add_argument("--base-port", type=int, default=0, help="ZooKeeper on P, replicas on P+1..")
    p.add_argument("--ensemble", type=int, choices=(1, 3), default=1)
    p.add_argument("--session-timeout", type=float, default=4.0)
    p.add_argument("--workdir", default="", help="keep logs and code here (default: temp)")
    p.add_argument("--demo", action="store_true", help="submit, fail over, show, then exit")
    p.set_defaults(func=run)


class Cluster:
    """The processes of a dev cluster, stopped together."""

    def __init__(self, zk: str, workdir: Path, args: argparse.Namespace) -> None:
        self.zk = zk
        self.workdir = workdir
        self.args = args
        self.replicas: dict[str, subprocess.Popen[bytes]] = {}
        self.supervisors: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "nimbus.cli", *cmd], stdout=log, stderr=subprocess.STDOUT
            )
        finally:
            log.close()

    def start_replica(self, port: int, ui_port: int = 0) -> None:
        address = f"127.0.0.1:{port}"
        self.replicas[address] = self._spawn(
            f"replica-{port}",
            [
                "serve", "--zookeeper", self.zk, "--listen", address,
                "--session-timeout", str(self.args.session_timeout),
                "--code-dir", str(self.workdir / f"code-{port}"),
                "--replicas", str(self.args.replicas), "--sync-interval", "0.5",
                "--heartbeat-timeout", "5",
                *(["--ui-port", str(ui_port)] if ui_port else []),
            ],
        )  # fmt: skip
        ui = f"  web UI http://127.0.0.1:{ui_port}/" if ui_port else ""
        print(f"nimbus replica   {address}{ui}  (log {self.workdir}/replica-{port}.log)")

    def start_supervisor(self, index: int) -> None:
        name = f"supervisor-{index}"
        self.supervisors[name] = self._spawn(
            name,
            [
                "supervisor", "--zookeeper", self.zk, "--id", name, "--slots", "4",
                "--session-timeout", str(self.args.session_timeout),
                "--heartbeat-interval", "1", "--no-workers",
            ],
        )  # fmt: skip
        print(f"supervisor       {name}  (log {self.workdir}/{name}.log)")

    def stop(self) -> None:
        procs = [*self.replicas.values(), *self.supervisors.values()]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _show_cluster(client: NimbusClient) -> pb.GetLeaderAddressResponse:
    leader = client.leader()
    print(f"leader: {leader.replica_id} (epoch {leader.epoch})")
    for n in client.nimbuses().nimbuses:
        role = records.NimbusRole.Name(n.role).lower()
        print(f"  {n.address:<22} {role:<9} uptime {n.uptime_s:6.1f}s")
    return leader


def _show_topology(client: NimbusClient, name: str) -> None:
    detail = client.describe(name)
    s = detail.summary
    print(
        f"topology {s.id}: {records.TopologyStatus.Name(s.status)}, epoch {s.epoch}, "
        f"code held by {', '.join(s.code_replicas)}"
    )
    for w in detail.workers:
        age = f"{w.heartbeat_age_s:.1f}s ago" if w.heartbeat_age_s >= 0 else "never"
        print(f"  worker {w.supervisor_id}/{w.slot}: {w.state} (heartbeat {age})")


def _demo(cluster: Cluster, client: NimbusClient, stop: threading.Event) -> int:
    first = _show_cluster(client)
    package = make_package({"topology.py": EXAMPLE_TOPOLOGY}, cluster.workdir / "example.zip")
    data = package.read_bytes()
    header = pb.SubmitHeader(
        name="example",
        expected_digest=hashlib.sha256(data).hexdigest(),
        package_size=len(data),
        num_workers=2,
    )
    reply = client.submit(header, lambda: iter([data]))
    print(f"submitted {reply.topology_id}, acknowledged once held by {len(reply.code_replicas)}")
    deadline = time.monotonic() + 30
    while not client.describe("example").workers and time.monotonic() < deadline:
        stop.wait(0.2)  # the scheduler places the workers within a pass or two
    _show_topology(client, "example")
    print(f"killing the leader {first.replica_id} (SIGKILL)...")
    started = time.monotonic()
    cluster.replicas[first.replica_id].kill()
    cluster.replicas[first.replica_id].wait()
    new = client.leader()
    while new.replica_id == first.replica_id or new.epoch <= first.epoch:
        stop.wait(0.05)
        new = client.leader()
    took = time.monotonic() - started
    print(f"new leader: {new.replica_id} (epoch {new.epoch}) after {took:.1f} s")
    _show_topology(client, "example")
    status = client.describe("example").summary.status
    return 0 if status == records.ACTIVE else 1


def run(args: argparse.Namespace) -> int:
    if args.replicas < 1 or args.supervisors < 0:
        print("nimbus dev: --replicas must be >= 1 and --supervisors >= 0", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nimbus-dev-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.base_port:
        zk_port = args.base_port
        replica_ports = [args.base_port + 1 + i for i in range(args.replicas)]
    else:
        zk_port, *replica_ports = free_ports(args.replicas + 1)
    ui_ports = (
        [args.base_port + 1 + args.replicas + i for i in range(args.replicas)]
        if args.base_port
        else free_ports(args.replicas)
    )
    try:
        with ZooKeeperCluster(size=args.ensemble, first_client_port=zk_port) as zk:
            print(f"zookeeper        {zk.connect_string}  ({args.ensemble} node(s))")
            cluster = Cluster(zk.connect_string, workdir, args)
            try:
                for port, ui_port in zip(replica_ports, ui_ports, strict=True):
                    cluster.start_replica(port, ui_port)
                for index in range(1, args.supervisors + 1):
                    cluster.start_supervisor(index)
                with NimbusClient(list(cluster.replicas), deadline=60, attempts=400) as client:
                    if args.demo:
                        return _demo(cluster, client, stop)
                    _show_cluster(client)
                    print("running; Ctrl-C to stop", flush=True)
                    while not stop.wait(0.5):
                        pass
                return 0
            finally:
                # Replicas and supervisors first, while ZooKeeper still serves their
                # graceful hand-over; ZooKeeper stops when the ``with`` ends.
                cluster.stop()
    except NimbusError as e:
        print(f"nimbus dev: {e}", file=sys.stderr)
        return 1
