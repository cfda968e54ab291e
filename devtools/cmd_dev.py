"""``nimbus dev``: the embedded default, a whole cluster on this machine in one command.

Starts a ZooKeeper (standalone, or ``--ensemble 3``), ``--replicas`` Nimbus replicas and
``--supervisors`` supervisors as separate processes on loopback, prints one line per
process, and stops them all cleanly on Ctrl-C or SIGTERM. ``--demo`` is the README's
main job: submit the word-count example (``examples/wordcount``) reading a folder of
text, wait for its exact counts from a real Spark worker, SIGKILL the leader Nimbus, feed
more text and show the pipeline counting it while the replicas elect a new leader, show
the new leader and its epoch, kill the topology with ``nimbus kill`` (the CLI, through
the new leader), wait for the worker to stop, and exit 0 (1 if any step failed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cluster.api import pb, records
from cluster.errors import NimbusError
from code_sync.package import make_package
from devtools.zkserver import ZooKeeperCluster, free_ports
from nimbus.client import NimbusClient

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "wordcount"
#: The example's tokenizer (``WORD_SEPARATOR`` in its topology.py), for the exact check.
WORD_SEPARATOR = re.compile(r"[^a-z0-9']+")
MORE_TEXT = "the leader is gone and the stream goes on\nthe stream goes on\n"


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
        pid = self.replicas[address].pid
        print(f"nimbus replica   {address}{ui}  (pid {pid}, log {self.workdir}/replica-{port}.log)")

    def start_supervisor(self, index: int) -> None:
        name = f"supervisor-{index}"
        self.supervisors[name] = self._spawn(
            name,
            [
                "supervisor", "--zookeeper", self.zk, "--id", name, "--slots", "4",
                "--session-timeout", str(self.args.session_timeout),
                "--heartbeat-interval", "1",
                "--state-dir", str(self.workdir / name),
            ],
        )  # fmt: skip
        pid = self.supervisors[name].pid
        print(f"supervisor       {name}  (pid {pid}, log {self.workdir}/{name}.log)")

    def report_exits(self, reported: set[str]) -> None:
        """Say once, per process, that one of the cluster's processes has exited."""
        for name, proc in [*self.replicas.items(), *self.supervisors.items()]:
            code = proc.poll()
            if code is not None and name not in reported:
                reported.add(name)
                kind = "replica" if name in self.replicas else "supervisor"
                print(
                    f"{kind} {name} (pid {proc.pid}) exited with status {code}; the rest "
                    "keep running (see its log)",
                    flush=True,
                )

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


def _all_registered(client: NimbusClient, replicas: int, stop: threading.Event) -> bool:
    """Wait until every replica started is listed: a replica registers some time after
    its process starts, and a listing before that would show fewer than were started."""

    def listed() -> bool:
        return len(client.nimbuses().nimbuses) >= replicas

    return _wait(stop, f"all {replicas} replicas to register", listed, 60)


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


def _count_words(folder: Path) -> dict[str, int]:
    """What the word count must produce: a plain-Python count of the same text."""
    words: Counter[str] = Counter()
    for path in sorted(folder.iterdir()):
        for line in path.read_text().splitlines():
            words.update(w for w in WORD_SEPARATOR.split(line.lower()) if w)
    return dict(words)


def _output_counts(folder: Path) -> dict[str, int]:
    from pipeline.sinks import latest_by_key, read_batches  # no pyspark import needed

    latest = latest_by_key(read_batches(folder), "word")
    return {key[0]: int(row["count"]) for key, row in latest.items()}


def _wait(stop: threading.Event, what: str, check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not stop.is_set() and time.monotonic() < deadline:
        if check():
            return True
        stop.wait(0.5)
    print(f"demo: gave up waiting for {what} after {timeout:g} s", file=sys.stderr)
    return False


def _demo(cluster: Cluster, client: NimbusClient, stop: threading.Event) -> int:
    if not (EXAMPLE / "topology.py").is_file():
        print(f"demo: the word-count example is not at {EXAMPLE}", file=sys.stderr)
        return 1
    if not _all_registered(client, len(cluster.replicas), stop):
        return 1
    first = _show_cluster(client)
    inbox, out = cluster.workdir / "input", cluster.workdir / "output"
    inbox.mkdir(exist_ok=True)
    for part in sorted((EXAMPLE / "corpus").iterdir()):
        shutil.copy(part, inbox / part.name)
    config = {"input": str(inbox), "output": str(out), "parallelism": 2}
    package = make_package(
        {
            "topology.py": (EXAMPLE / "topology.py").read_bytes(),
            "config.json": json.dumps(config).encode(),
        },
        cluster.workdir / "wordcount.zip",
    )
    data = package.read_bytes()
    header = pb.SubmitHeader(
        name="wordcount",
        expected_digest=hashlib.sha256(data).hexdigest(),
        package_size=len(data),
        num_workers=1,
    )
    reply = client.submit(header, lambda: iter([data]))
    print(f"submitted {reply.topology_id}, acknowledged once held by {len(reply.code_replicas)}")
    print(f"counting the words of {inbox} into {out} (a Spark worker starts: ~20 s)...")
    expected = _count_words(inbox)
    if not _wait(stop, "exact counts", lambda: _output_counts(out) == expected, 180):
        return 1
    print(f"counts exact: {len(expected)} words, {sum(expected.values())} in all")
    _show_topology(client, "wordcount")

    print(f"killing the leader {first.replica_id} (SIGKILL) and feeding more text...")
    started = time.monotonic()
    cluster.replicas[first.replica_id].kill()
    cluster.replicas[first.replica_id].wait()
    staging = cluster.workdir / ".more.txt"
    staging.write_text(MORE_TEXT)
    staging.rename(inbox / "more.txt")  # whole files only: the spout never sees half one
    expected = _count_words(inbox)
    if not _wait(stop, "the new text counted", lambda: _output_counts(out) == expected, 120):
        return 1
    counted_after = time.monotonic() - started
    print(
        f"the new text was counted {counted_after:.1f} s after the kill "
        "(workers need no Nimbus to keep running)"
    )
    new = client.leader()
    while new.replica_id == first.replica_id or new.epoch <= first.epoch:
        stop.wait(0.05)
        new = client.leader()
    took = time.monotonic() - started
    print(f"new leader: {new.replica_id} (epoch {new.epoch}) {took:.1f} s after the kill")
    _show_topology(client, "wordcount")
    active = client.describe("wordcount").summary.status == records.ACTIVE

    seeds = ",".join(a for a, p in cluster.replicas.items() if p.poll() is None)
    command = ["nimbus", "kill", "wordcount", "--wait", "0", "--seeds", seeds]
    print(f"$ {' '.join(command)}")
    killed = subprocess.run(
        [sys.executable, "-m", "nimbus.cli", *command[1:]], capture_output=True, text=True
    )
    print(killed.stdout.strip() or killed.stderr.strip())
    if killed.returncode != 0:
        return 1
    pids = list(cluster.workdir.glob("supervisor-*/workers/*/worker.pid"))
    worker = int(pids[0].read_text()) if pids else None
    if worker is None or not _wait(stop, "the worker to stop", lambda: not _alive(worker), 60):
        return 1
    print(f"worker {worker} stopped; final counts exact: {_output_counts(out) == expected}")
    return 0 if active and _output_counts(out) == expected else 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (exited, not yet reaped) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return True


def run(args: argparse.Namespace) -> int:
    if args.replicas < 1 or args.supervisors < 0:
        print("nimbus dev: --replicas must be >= 1 and --supervisors >= 0", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    temporary = not args.workdir
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nimbus-dev-"))
    workdir.mkdir(parents=True, exist_ok=True)
    code = 1
    try:
        code = _run(args, workdir, stop)
        return code
    finally:
        # A folder of our own making goes, unless the run failed: then its logs tell why.
        if temporary and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        elif temporary:
            print(f"nimbus dev: logs kept in {workdir}", file=sys.stderr)


def _run(args: argparse.Namespace, workdir: Path, stop: threading.Event) -> int:
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
                seeds = ",".join(cluster.replicas)
                print(f"seeds            {seeds}  (or: export NIMBUS_SEEDS={seeds})")
                with NimbusClient(list(cluster.replicas), deadline=60, attempts=400) as client:
                    if args.demo:
                        return _demo(cluster, client, stop)
                    if not _all_registered(client, len(cluster.replicas), stop):
                        return 0 if stop.is_set() else 1
                    _show_cluster(client)
                    print("running; Ctrl-C to stop", flush=True)
                    exited: set[str] = set()
                    while not stop.wait(0.5):
                        cluster.report_exits(exited)
                return 0
            finally:
                # Replicas and supervisors first, while ZooKeeper still serves their
                # graceful hand-over; ZooKeeper stops when the ``with`` ends.
                cluster.stop()
    except NimbusError as e:
        print(f"nimbus dev: {e}", file=sys.stderr)
        return 1
