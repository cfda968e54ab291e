"""bench/scale.py's cluster: N topologies seeded straight into ZooKeeper, replicas that hold
their package, and the steps a new leader logs on its way into office.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import _replicas
from _common import BenchError, free_port
from _replicas import ReplicaCluster
from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from code_sync.package import make_package

REPLICAS = 2
SESSION_TIMEOUT_S = 4.0
SYNC_INTERVAL_S = 1.0
SEED_TXN_OPS = 500  # operations per seeding multi-op (two per topology)
SEED_TIMEOUT_S = 120.0
RPC_TIMEOUT_S = 1.0
READY_TIMEOUT_S = 600.0  # a replica registers as holder of every topology before queueing
QUEUED = "queued for leadership"
TOPOLOGY_SOURCE = b'"""Scale benchmark topology: never run."""\n'


# "2026-11-22 10:00:00,123 INFO leader.elector: <message>" (nimbus serve's log format)
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.]+): (.*)$")
# Steps of the new leader, as logged by leader.elector and nimbus.server.daemon.
STEPS = (
    ("won the lock", re.compile(r": won the lock \(")),
    ("took office", re.compile(r": took office, epoch \d+")),
    ("leading", re.compile(r"^leading with epoch \d+")),
)


def topology_name(i: int) -> str:
    return f"scale-{i:05d}"


def topology_id(name: str) -> str:
    return f"{name}-1-1"


# -- the package and the seed -----------------------------------------------------------


@dataclass(frozen=True)
class Package:
    path: Path
    digest: str
    size: int


def build_package(dest: Path) -> Package:
    make_package({"topology.py": TOPOLOGY_SOURCE}, dest)
    data = dest.read_bytes()
    return Package(dest, hashlib.sha256(data).hexdigest(), len(data))


def place_package(package: Package, code_dir: Path) -> None:
    """``<code-dir>/<digest>``, read-only like the store's own files."""
    code_dir.mkdir(parents=True, exist_ok=True)
    target = code_dir / package.digest
    if target.exists():
        return
    shutil.copyfile(package.path, target)
    os.chmod(target, 0o444)


def seed(connect: str, root: str, n: int, package: Package) -> float:
    """Folders, N StormBase records and N name nodes; returns the seconds it took."""
    began = time.perf_counter()
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30.0)
    try:
        paths = Paths(root)
        for folder in paths.folders():
            client.ensure_path(folder)
        launched = int(time.time() * 1000)
        pending: list[Any] = []
        txn = client.transaction()
        ops = 0
        for i in range(n):
            name = topology_name(i)
            tid = topology_id(name)
            base = records.StormBase(
                name=name,
                status=records.ACTIVE,
                digest=package.digest,
                num_workers=1,
                epoch=1,
                launch_time_ms=launched,
                config_json="{}",
                package_size=package.size,
            )
            txn.create(paths.storm(tid), base.SerializeToString(deterministic=True))
            txn.create(paths.name(name), tid.encode())
            ops += 2
            if ops >= SEED_TXN_OPS:
                pending.append(txn.commit_async())
                txn, ops = client.transaction(), 0
        if ops:
            pending.append(txn.commit_async())
        for result in pending:
            outcome = result.get(timeout=SEED_TIMEOUT_S)
            failed = [r for r in outcome if isinstance(r, Exception)]
            if failed:
                raise BenchError(f"seeding {root} failed: {failed[0]!r}")
        stored = len(client.get_children(f"{root}/storms"))
        if stored != n:
            raise BenchError(f"seeded {n} topologies under {root}, found {stored}")
    finally:
        client.stop()
        client.close()
    return time.perf_counter() - began


# -- replicas as processes --------------------------------------------------------------


@dataclass
class Replica(_replicas.Replica):
    code_dir: Path

    def queued(self) -> bool:
        """Whether the current process logged that it queued (its code gate passed)."""
        return QUEUED in self.log_since(self.log_offset)


@dataclass
class Cluster(ReplicaCluster[Replica]):
    ready_timeout_s = READY_TIMEOUT_S
    stop_grace_s = 15.0

    notes: list[str] = field(default_factory=list)

    def add_replica(self, package: Package) -> Replica:
        port = free_port()
        replica = Replica(
            port, self.log_path(port), rpc_timeout=RPC_TIMEOUT_S, code_dir=self.code_dir(port)
        )
        place_package(package, replica.code_dir)
        self.replicas.append(replica)
        return replica

    def launch(self, replica: Replica) -> None:
        extra = (
            "--replicas", str(REPLICAS), "--min-replicas", "1",
            "--sync-interval", f"{SYNC_INTERVAL_S:g}",
        )  # fmt: skip
        self.serve(replica, SESSION_TIMEOUT_S, extra)

    def other(self, replica: Replica) -> Replica:
        return next(r for r in self.replicas if r is not replica)

    def passes(self, replica: Replica) -> bool:
        """Ready only once it has queued (its code gate passed)."""
        return replica.queued()


def _log_time(stamp: str) -> float:
    """A log line's asctime (local wall clock, ms) as a Unix time."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def steps_from_log(text: str, since_wall: float) -> dict[str, float]:
    """Seconds from ``since_wall`` to the first line of each of ``STEPS`` in ``text``."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        parsed = _parse_log_line(line)
        if parsed is None:
            continue
        stamp, message = parsed
        for step, pattern in STEPS:
            if step not in found and pattern.search(message):
                found[step] = _log_time(stamp) - since_wall
    return found


def _parse_log_line(line: str) -> tuple[str, str] | None:
    """(asctime, message) of a text or JSON (``--log-format json``) log line."""
    if line.startswith("{"):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return None
        if isinstance(event, dict) and "time" in event and "message" in event:
            return str(event["time"]), str(event["message"])
        return None
    match = _LOG_LINE.match(line)
    return (match.group(1), match.group(4)) if match else None
