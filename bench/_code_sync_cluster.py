"""bench/code_sync_throughput.py's cluster: the package, two replicas that sync it, and a
submit timed until the second replica holds what the leader accepted.
"""

from __future__ import annotations

import hashlib
import os
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import _replicas
from _common import BenchError, free_port
from _replicas import ReplicaCluster

from cluster.api import pb
from code_sync.package import make_package
from nimbus.client import NimbusClient
from pipeline.samples import MINIMAL_TOPOLOGY

MIB = 1 << 20
REPLICAS = 2
SESSION_TIMEOUT_S = 4.0
SYNC_INTERVAL_S = 0.2
MAX_PACKAGE_MIB = 200
SUBMIT_TIMEOUT_S = 600.0
SUBMIT_CHUNK = 1 << 20  # what `nimbus submit` sends per message
E2E_POLL_S = 0.01
E2E_TIMEOUT_S = 300.0
RPC_TIMEOUT_S = 1.0
TOPOLOGY_SOURCE = MINIMAL_TOPOLOGY  # the leader validates build() at submit
BLOB_ENTRY = "data/blob.bin"


# -- the package ------------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    path: Path
    digest: str
    size: int

    @property
    def mib(self) -> float:
        return self.size / MIB


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def build_package(dest: Path, blob_mib: int) -> Package:
    """``make_package`` with ``topology.py`` and ``blob_mib`` MiB of random bytes."""
    blob = os.urandom(blob_mib * MIB)
    make_package({"topology.py": TOPOLOGY_SOURCE, BLOB_ENTRY: blob}, dest)
    return Package(dest, sha256_file(dest), dest.stat().st_size)


def entry_compression(path: Path) -> str:
    """How the blob entry is stored in the zip: ``stored`` or ``deflated``."""
    with zipfile.ZipFile(path) as archive:
        method = archive.getinfo(BLOB_ENTRY).compress_type
    return {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}.get(method, str(method))


# -- replicas as processes --------------------------------------------------------------


@dataclass
class Replica(_replicas.Replica):
    code_dir: Path

    def holds(self, digest: str) -> bool:
        return (self.code_dir / digest).is_file()


@dataclass
class Cluster(ReplicaCluster[Replica]):
    def start_replica(self) -> Replica:
        port = free_port()
        replica = Replica(
            port, self.log_path(port), rpc_timeout=RPC_TIMEOUT_S, code_dir=self.code_dir(port)
        )
        extra = (
            "--replicas", str(REPLICAS), "--min-replicas", "1",
            "--sync-interval", f"{SYNC_INTERVAL_S:g}",
            "--max-package-mib", str(MAX_PACKAGE_MIB),
        )  # fmt: skip
        self.serve(replica, SESSION_TIMEOUT_S, extra)
        self.replicas.append(replica)
        return replica


# -- submit (NimbusClient) --------------------------------------------------------------


@dataclass(frozen=True)
class Submitted:
    submit_s: float  # NimbusClient.submit call: upload, leader's store.write, publish
    e2e_s: float  # submit returned -> the second replica holds the package
    e2e_from_start_s: float  # submit called -> the second replica holds the package
    held_at_return: bool  # the second replica already held it when submit returned
    code_replicas: list[str]


def submit_and_wait(cluster: Cluster, leader: Replica, package: Package) -> Submitted:
    """Submit to the leader (``--min-replicas 1``), then time the second replica's copy."""
    second = next(r for r in cluster.replicas if r is not leader)
    header = pb.SubmitHeader(
        name="bench-code-sync",
        config_json="{}",
        expected_digest=package.digest,
        package_size=package.size,
        num_workers=1,
    )

    def chunks() -> Iterator[bytes]:
        with package.path.open("rb") as f:
            while block := f.read(SUBMIT_CHUNK):
                yield block

    client = NimbusClient(
        [r.address for r in cluster.replicas],
        attempts=5,
        deadline=SUBMIT_TIMEOUT_S,
        call_timeout=5.0,
    )
    try:
        began = time.perf_counter()
        reply = client.submit(header, chunks, timeout=SUBMIT_TIMEOUT_S)
        returned = time.perf_counter()
    finally:
        client.close()
    if reply.digest != package.digest:
        raise BenchError(f"submit stored digest {reply.digest}, expected {package.digest}")
    held_at_return = second.holds(package.digest)
    deadline = returned + E2E_TIMEOUT_S
    while not second.holds(package.digest):
        if time.perf_counter() > deadline:
            raise BenchError(
                f"{second.address} did not hold the package {E2E_TIMEOUT_S:.0f} s after the "
                f"submit returned\n{cluster.tails()}"
            )
        time.sleep(E2E_POLL_S)
    held = time.perf_counter()
    if not leader.holds(package.digest):
        raise BenchError(f"the leader {leader.address} does not hold the package it accepted")
    return Submitted(
        submit_s=returned - began,
        e2e_s=held - returned,
        e2e_from_start_s=held - began,
        held_at_return=held_at_return,
        code_replicas=list(reply.code_replicas),
    )
