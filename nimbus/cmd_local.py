"""``nimbus local``: the embedded default in one command.

Starts a ZooKeeper (standalone, or ``--ensemble 3``) and ``--replicas`` Nimbus replicas as
separate ``nimbus serve`` processes on loopback, waits until they agree on a leader and
prints the cluster. With ``--demo`` it then stops the leader gracefully, shows the
hand-over to a new epoch (an example topology, submitted first, stays ACTIVE), and
exits; without it, it runs until Ctrl-C or SIGTERM.
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


def register(sub: Any) -> None:
    p = sub.add_parser("local", help="run ZooKeeper and several replicas on this machine")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--ensemble", type=int, choices=(1, 3), default=1)
    p.add_argument("--session-timeout", type=float, default=4.0)
    p.add_argument("--workdir", default="", help="keep logs and code here (default: temp)")
    p.add_argument("--demo", action="store_true", help="show a graceful failover, then exit")
    p.set_defaults(func=run)


def _print_cluster(client: NimbusClient) -> pb.GetLeaderAddressResponse:
    leader = client.leader()
    print(f"leader: {leader.replica_id} (epoch {leader.epoch})")
    for n in client.nimbuses().nimbuses:
        role = records.NimbusRole.Name(n.role).lower()
        print(f"  {n.address:<22} {role:<9} uptime {n.uptime_s:6.1f}s")
    return leader


EXAMPLE_TOPOLOGY = b"""\"\"\"Example package made by `nimbus local --demo`.\"\"\"


def build():
    # The pipelines issue defines the spout/bolt API this returns.
    return None
"""


def _submit_example(client: NimbusClient, workdir: Path) -> pb.SubmitTopologyResponse:
    package = make_package({"topology.py": EXAMPLE_TOPOLOGY}, workdir / "example.zip")
    data = package.read_bytes()
    header = pb.SubmitHeader(
        name="example", expected_digest=hashlib.sha256(data).hexdigest(), package_size=len(data)
    )
    return client.submit(header, lambda: iter([data]))


def _describe(client: NimbusClient, name: str) -> None:
    s = client.describe(name).summary
    status = records.TopologyStatus.Name(s.status)
    print(f"topology {s.id}: {status}, code held by {', '.join(s.code_replicas)}")


def _start_replica(
    zk: str, port: int, workdir: Path, session: float, replicas: int
) -> subprocess.Popen[bytes]:
    log = (workdir / f"replica-{port}.log").open("ab")
    cmd = [
        sys.executable, "-m", "nimbus.cli", "serve", "--zookeeper", zk,
        "--listen", f"127.0.0.1:{port}", "--session-timeout", str(session),
        "--code-dir", str(workdir / f"code-{port}"), "--replicas", str(replicas),
        "--sync-interval", "0.5",
    ]  # fmt: skip
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def run(args: argparse.Namespace) -> int:
    if args.replicas < 1:
        print("nimbus local: --replicas must be at least 1", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nimbus-local-"))
    workdir.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with ZooKeeperCluster(size=args.ensemble) as zk:
            print(f"ZooKeeper: {zk.connect_string} ({args.ensemble} node(s)); logs in {workdir}")
            for port in free_ports(args.replicas):
                procs[f"127.0.0.1:{port}"] = _start_replica(
                    zk.connect_string, port, workdir, args.session_timeout, args.replicas
                )
            with NimbusClient(list(procs), deadline=60, attempts=400) as client:
                first = _print_cluster(client)
                if args.demo:
                    reply = _submit_example(client, workdir)
                    print(
                        f"submitted {reply.topology_id}: acknowledged once held by "
                        f"{', '.join(reply.code_replicas)}"
                    )
                    print(f"stopping the leader {first.replica_id} gracefully (SIGTERM)...")
                    started = time.monotonic()
                    procs[first.replica_id].send_signal(signal.SIGTERM)
                    procs[first.replica_id].wait(30)
                    new = client.leader()
                    while new.replica_id == first.replica_id or new.epoch <= first.epoch:
                        stop.wait(0.05)
                        new = client.leader()
                    took = (time.monotonic() - started) * 1000
                    print(f"new leader: {new.replica_id} (epoch {new.epoch}) after {took:.0f} ms")
                    _describe(client, "example")
                    return 0
                print("running; Ctrl-C to stop")
                stop.wait()
            return 0
    except NimbusError as e:
        print(f"nimbus local: {e}", file=sys.stderr)
        return 1
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
