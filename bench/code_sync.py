"""What syncing a package between replicas costs, against a raw socket doing the same work.

Makes a topology package (``make_package``: ``topology.py`` and an incompressible
``os.urandom`` blob of 64 MiB, 16 MiB with ``--quick``), starts its own standalone
ZooKeeper and two ``nimbus serve`` replicas (processes on loopback, under a fresh
``--root /bench-<uuid>``, ``--min-replicas 1``), submits the package to the leader with
``NimbusClient.submit``, then measures in one run:

* e2e (once, extra information): from the moment the submit returns until the second
  replica holds the package (its code dir polled every 10 ms for the digest file);
* sync: exactly what a syncing replica does, in this process, from the leader:
  ``CodeStore(<fresh dir>).write(fetch_from_peer(leader, digest), expected_digest=digest,
  validate=False)``
  - gRPC ``DownloadCode`` streaming, SHA-256, temp file, fsync, rename, directory fsync,
  package validation;
* raw socket: the same bytes over a loopback TCP connection (a server thread sends the
  file in 1 MiB chunks; the client fills 1 MiB buffers, hashes them with
  ``hashlib.sha256``, writes them to a temp file, fsyncs, checks the digest, renames,
  fsyncs the directory): the durable, verified transfer with nothing else around it.

* the parts of a sync, timed alone to show where its time goes: the gRPC stream with the
  chunks discarded, and ``validate_package`` on the package file. For the sync and the
  stream, the serving replica's CPU time and minor page faults (``/proc/<pid>/stat``).

Every method runs once per round, the order rotating, after one untimed warm-up round;
every transfer goes into a fresh directory that is deleted afterwards. ``sync_over_raw``
is the ratio of the p50 throughputs (the issue's target is at least 0.5).

``make_package`` deflates every file entry; on random bytes zlib falls back to stored
blocks, so the zip is the blob plus a few KiB and validation inflates at memcpy speed.

Run from the repo root: ``python bench/code_sync.py [--quick]``. The last line of stdout is
one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import importlib
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import _replicas
from _common import (
    BenchError,
    exit_on_sigterm,
    free_port,
    load_1min,
    machine_facts,
    percentile,
    print_table,
)
from _replicas import serve_command, stop_all, tails, zookeeper_version

from cluster.api import pb
from code_sync.package import make_package, validate_package
from code_sync.peer import fetch_from_peer
from code_sync.store import CodeStore
from devtools.zkserver import ZooKeeperCluster
from pipeline.samples import MINIMAL_TOPOLOGY

MIB = 1 << 20
FULL_BLOB_MIB = 64
QUICK_BLOB_MIB = 16
FULL_REPETITIONS = 5
QUICK_REPETITIONS = 3
WARMUP_ROUNDS = 1

REPLICAS = 2
SESSION_TIMEOUT_S = 4.0
SYNC_INTERVAL_S = 0.2
MAX_PACKAGE_MIB = 200
MAX_PACKAGE_BYTES = MAX_PACKAGE_MIB * MIB
FETCH_TIMEOUT_S = 600.0
SUBMIT_TIMEOUT_S = 600.0
RAW_CHUNK = 1 << 20  # the raw server's send size and the client's buffer
SUBMIT_CHUNK = 1 << 20  # what `nimbus submit` sends per message

E2E_POLL_S = 0.01
E2E_TIMEOUT_S = 300.0
SETTLE_S = 1.5  # after e2e: lets the replicas' first verifications of the new file finish
READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.05
RPC_TIMEOUT_S = 1.0
TARGET_RATIO = 0.5

SYNC = "sync"
RAW = "raw socket"
STREAM = "part: gRPC stream"
VALIDATE = "part: validate"
METHODS = (SYNC, RAW)  # the comparison
PARTS = (STREAM, VALIDATE)  # pieces of the sync, timed alone to show where its time goes
DESCRIPTIONS = {
    SYNC: "CodeStore.write(fetch_from_peer()): gRPC DownloadCode, sha256, fsync, rename",
    RAW: "loopback TCP, 1 MiB chunks: sha256, write, fsync, rename",
    STREAM: "fetch_from_peer() alone, chunks discarded (no hashing, no disk)",
    VALIDATE: "validate_package() alone on the package file (page cache)",
}

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
class Cluster:
    zookeeper: str
    root: str
    workdir: Path
    replicas: list[Replica] = field(default_factory=list)

    def start_replica(self) -> Replica:
        port = free_port()
        code_dir = self.workdir / f"code-{port}"
        log_path = self.workdir / f"replica-{port}.log"
        replica = Replica(port, log_path, rpc_timeout=RPC_TIMEOUT_S, code_dir=code_dir)
        extra = (
            "--replicas", str(REPLICAS), "--min-replicas", "1",
            "--sync-interval", f"{SYNC_INTERVAL_S:g}",
            "--max-package-mib", str(MAX_PACKAGE_MIB),
        )  # fmt: skip
        replica.launch(
            serve_command(
                zookeeper=self.zookeeper,
                root=self.root,
                listen=replica.address,
                session_timeout=SESSION_TIMEOUT_S,
                code_dir=code_dir,
                extra=extra,
            )
        )
        self.replicas.append(replica)
        return replica

    def by_address(self, address: str) -> Replica:
        for replica in self.replicas:
            if replica.address == address:
                return replica
        raise BenchError(f"{address} is not one of the bench's replicas")

    def wait_ready(self) -> Replica:
        """Until every replica lists all of them and all name one leader; returns it."""
        expected = frozenset(r.address for r in self.replicas)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for replica in self.replicas:
                if not replica.alive():
                    raise BenchError(
                        f"replica {replica.address} exited with {replica.returncode}\n"
                        f"{replica.log_tail()}"
                    )
            if all(r.listening() for r in self.replicas) and all(
                r.registered() == expected for r in self.replicas
            ):
                named = {r.leader() for r in self.replicas}
                if len(named) == 1:
                    (leader,) = named
                    if leader is not None and leader[0] in expected:
                        return self.by_address(leader[0])
            time.sleep(READY_POLL_S)
        raise BenchError(f"the replicas were not ready in {READY_TIMEOUT_S:.0f} s\n{self.tails()}")

    def tails(self) -> str:
        return tails(self.replicas)

    def shutdown(self) -> None:
        stop_all(self.replicas, grace=10.0)


# -- submit (NimbusClient) --------------------------------------------------------------


class _Submitter(Protocol):
    def submit(
        self,
        header: pb.SubmitHeader,
        chunks: Callable[[], Iterator[bytes]],
        *,
        timeout: float = ...,
    ) -> pb.SubmitTopologyResponse: ...

    def close(self) -> None: ...


def nimbus_client(seeds: list[str]) -> _Submitter:
    """``nimbus.client.NimbusClient``, imported by name.

    A plain import would make ``mypy bench/code_sync.py`` (whose search path starts at
    bench/) resolve ``leader`` and, through it, ``fencing`` to the benchmark scripts of
    those names; at run time the repo root comes first and the real packages load.
    """
    module = importlib.import_module("nimbus.client")
    client: _Submitter = module.NimbusClient(
        seeds, attempts=5, deadline=SUBMIT_TIMEOUT_S, call_timeout=5.0
    )
    return client


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

    client = nimbus_client([r.address for r in cluster.replicas])
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


# -- the two transfers ------------------------------------------------------------------


def sync_once(source: Replica, package: Package, dest: Path) -> None:
    """What a syncing replica does for a package it lacks (``CodeSyncer._download``)."""
    store = CodeStore(dest, max_package_bytes=MAX_PACKAGE_BYTES)
    stored = store.write(
        fetch_from_peer(source.address, package.digest, timeout=FETCH_TIMEOUT_S),
        expected_digest=package.digest,
        validate=False,  # as the syncer: the digest names a package validated at submit
    )
    if stored.size != package.size:
        raise BenchError(f"sync stored {stored.size} bytes, expected {package.size}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RawServer:
    """One connection's worth of loopback TCP server: sends a file in ``RAW_CHUNK`` chunks.

    Listening before the clock starts, like the replica's gRPC server; accepts, sends and
    closes in its own thread.
    """

    def __init__(self, source: Path) -> None:
        self._source = source
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="raw-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
            with conn, self._source.open("rb", buffering=0) as f:
                while block := f.read(RAW_CHUNK):
                    conn.sendall(block)
        except BaseException as e:  # reported by join()
            self._error = e
        finally:
            self._listener.close()

    def join(self) -> None:
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            raise BenchError("the raw socket server did not finish")
        if self._error is not None:
            raise BenchError(f"the raw socket server failed: {self._error!r}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()


def raw_once(port: int, package: Package, dest: Path) -> None:
    """Receive, hash, write, fsync, check, rename, fsync the directory."""
    dest.mkdir()
    fd, name = tempfile.mkstemp(dir=dest, prefix="raw-", suffix=".part")
    tmp = Path(name)
    hasher = hashlib.sha256()
    buffer = bytearray(RAW_CHUNK)
    view = memoryview(buffer)
    size = 0
    try:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            done = False
            while not done:
                filled = 0
                while filled < RAW_CHUNK:
                    n = conn.recv_into(view[filled:])
                    if n == 0:
                        done = True
                        break
                    filled += n
                if filled:
                    block = view[:filled]
                    hasher.update(block)
                    while block:
                        block = block[os.write(fd, block) :]
                    size += filled
        os.fsync(fd)
    finally:
        os.close(fd)
    digest = hasher.hexdigest()
    if digest != package.digest or size != package.size:
        raise BenchError(f"raw transfer got {size} bytes hashing to {digest}")
    os.replace(tmp, dest / digest)
    _fsync_dir(dest)


# -- measuring --------------------------------------------------------------------------


@dataclass
class Series:
    seconds: list[float] = field(default_factory=list)
    server_cpu_s: list[float] = field(default_factory=list)  # the serving replica's, per run
    server_faults: list[float] = field(default_factory=list)  # its minor page faults, per run

    def mib_per_s(self, mib: float) -> list[float]:
        return [mib / s for s in self.seconds]


def process_usage(pid: int) -> tuple[float, int] | None:
    """CPU seconds (user + system) and minor page faults of a process so far (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    # After the command name: state ppid pgrp session tty tpgid flags minflt ... utime stime
    return (int(fields[11]) + int(fields[12])) / ticks, int(fields[7])


def measure(
    source: Replica, package: Package, scratch: Path, rounds: int, warmup: int
) -> dict[str, Series]:
    """Every method once per round, the order rotating; transfers into fresh directories.

    Sync and raw are the comparison; the parts (the gRPC stream alone, validation alone)
    are interleaved the same way so the breakdown comes from the same conditions.
    """
    names = [*METHODS, *PARTS]
    series = {name: Series() for name in names}
    counter = 0

    def stream_only() -> None:
        for _ in fetch_from_peer(source.address, package.digest, timeout=FETCH_TIMEOUT_S):
            pass

    def validate_only() -> None:
        validate_package(package.path, max_bytes=MAX_PACKAGE_BYTES)

    def timed(name: str, out: Series | None) -> float:
        nonlocal counter
        counter += 1
        dest = scratch / f"{counter:03d}"
        server = RawServer(package.path) if name == RAW else None
        gc.collect()
        before = process_usage(source.pid)
        try:
            start = time.perf_counter()
            if name == SYNC:
                sync_once(source, package, dest)
            elif name == STREAM:
                stream_only()
            elif name == VALIDATE:
                validate_only()
            elif server is not None:
                raw_once(server.port, package, dest)
            took = time.perf_counter() - start
            if server is not None:
                server.join()
        finally:
            if server is not None:
                server.close()
            shutil.rmtree(dest, ignore_errors=True)
        after = process_usage(source.pid)
        if out is not None:
            out.seconds.append(took)
            if before is not None and after is not None and name in (SYNC, STREAM):
                out.server_cpu_s.append(after[0] - before[0])
                out.server_faults.append(float(after[1] - before[1]))
        return took

    for i in range(warmup + rounds):
        shift = i % len(names)
        order = names[shift:] + names[:shift]
        label = "warm-up" if i < warmup else f"round {i - warmup + 1}/{rounds}"
        took = {name: timed(name, series[name] if i >= warmup else None) for name in order}
        print(
            f"  {label}: "
            + ", ".join(
                f"{name} {took[name]:.3f} s ({package.mib / took[name]:.0f} MiB/s)"
                for name in order
            ),
            file=sys.stderr,
            flush=True,
        )
    return series


# -- report -----------------------------------------------------------------------------


def _p50_or_none(samples: list[float]) -> float | None:
    return round(percentile(samples, 50), 4) if samples else None


def report(
    series: dict[str, Series],
    package: Package,
    submitted: Submitted,
    *,
    compression: str,
    source: str,
    rounds: int,
    warmup: int,
    quick: bool,
    zk_version: str,
    load_start: float,
    elapsed_s: float,
) -> dict[str, Any]:
    facts = machine_facts()
    mode = "quick" if quick else "full"
    mib = package.mib
    rates = {name: s.mib_per_s(mib) for name, s in series.items()}
    p50_rate = {name: percentile(r, 50) for name, r in rates.items()}
    best_rate = {name: max(r) for name, r in rates.items()}
    p50_s = {name: percentile(s.seconds, 50) for name, s in series.items()}
    ratio = p50_rate[SYNC] / p50_rate[RAW]

    print(
        f"code sync throughput ({mode}): a {mib:.2f} MiB package ({package.size} bytes; "
        f"make_package: topology.py + {BLOB_ENTRY} of os.urandom, entries {compression}), "
        f"{REPLICAS} `nimbus serve` replicas, standalone ZooKeeper {zk_version}, loopback"
    )
    print(
        f"{rounds} rounds after {warmup} warm-up round, every method once per round in "
        f"rotating order; every transfer into a fresh directory (deleted after); sync from "
        f"the leader {source} into this process"
    )
    print()
    rows: list[list[object]] = []
    for name in (*METHODS, *PARTS):
        s = series[name].seconds
        rows.append(
            [
                name,
                f"{p50_rate[name]:.1f}",
                f"{best_rate[name]:.1f}",
                f"{min(rates[name]):.1f}",
                f"{p50_s[name]:.3f}",
                f"{min(s):.3f}",
                f"{max(s):.3f}",
                f"{p50_rate[name] / p50_rate[RAW]:.2f}x",
            ]
        )
    print_table(
        ["method", "MiB/s p50", "MiB/s best", "MiB/s worst", "s p50", "s best", "s worst",
         "p50 / raw"],
        rows,
    )  # fmt: skip
    print()
    for name in (*METHODS, *PARTS):
        print(f"{name}: {DESCRIPTIONS[name]}")
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    print(f"sync / raw (p50 throughput) = {ratio:.3f}: {verdict} the target >= {TARGET_RATIO}")
    server = {name: series[name] for name in (SYNC, STREAM) if series[name].server_cpu_s}
    for name, got in server.items():
        print(
            f"serving replica during one {name}: CPU p50 {percentile(got.server_cpu_s, 50):.3f} s, "
            f"minor page faults p50 {percentile(got.server_faults, 50):.0f} "
            f"({package.size / 4096:.0f} pages of 4 KiB in the package)"
        )
    print()
    already = " (already held when the submit returned)" if submitted.held_at_return else ""
    print(
        f"submit (NimbusClient.submit to the leader, --min-replicas 1): {submitted.submit_s:.3f} s "
        f"({mib / submitted.submit_s:.0f} MiB/s); the second replica held the package "
        f"{submitted.e2e_s:.3f} s after it returned{already}, "
        f"{submitted.e2e_from_start_s:.3f} s after it was called"
    )
    print()
    load_end = load_1min()
    print(facts.line())
    print(
        f"load average (1 min) {load_start:.2f} at start, {load_end:.2f} at end; wall time "
        f"{elapsed_s:.1f} s including ZooKeeper and replica startup"
    )
    return {
        "benchmark": "code_sync",
        "quick": quick,
        "package_mib": round(mib, 3),
        "package_bytes": package.size,
        "entry_compression": compression,
        "repetitions": rounds,
        "warmup_rounds": warmup,
        "replicas": REPLICAS,
        "zookeeper_version": zk_version,
        "sync_mib_per_s": round(p50_rate[SYNC], 1),
        "sync_best_mib_per_s": round(best_rate[SYNC], 1),
        "sync_p50_s": round(p50_s[SYNC], 4),
        "raw_socket_mib_per_s": round(p50_rate[RAW], 1),
        "raw_socket_best_mib_per_s": round(best_rate[RAW], 1),
        "raw_socket_p50_s": round(p50_s[RAW], 4),
        "sync_over_raw": round(ratio, 3),
        "target_sync_over_raw": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
        "stream_only_mib_per_s": round(p50_rate[STREAM], 1),
        "stream_only_p50_s": round(p50_s[STREAM], 4),
        "validate_p50_s": round(p50_s[VALIDATE], 4),
        "server_cpu_per_sync_s": _p50_or_none(series[SYNC].server_cpu_s),
        "server_cpu_per_stream_s": _p50_or_none(series[STREAM].server_cpu_s),
        "server_minor_faults_per_sync": _p50_or_none(series[SYNC].server_faults),
        "sync_s": [round(s, 4) for s in series[SYNC].seconds],
        "raw_socket_s": [round(s, 4) for s in series[RAW].seconds],
        "submit_s": round(submitted.submit_s, 4),
        "e2e_second_replica_s": round(submitted.e2e_s, 4),
        "e2e_second_replica_from_submit_start_s": round(submitted.e2e_from_start_s, 4),
        "e2e_held_at_submit_return": submitted.held_at_return,
        "machine": facts.as_dict(),
        "load_1min_start": round(load_start, 2),
        "load_1min_end": round(load_end, 2),
        "wall_s": round(elapsed_s, 2),
    }


def run(*, quick: bool) -> dict[str, Any]:
    began = time.monotonic()
    load_start = load_1min()
    rounds = QUICK_REPETITIONS if quick else FULL_REPETITIONS
    blob_mib = QUICK_BLOB_MIB if quick else FULL_BLOB_MIB
    workdir = Path(tempfile.mkdtemp(prefix="nimbus-bench-code-sync-"))
    try:
        scratch = workdir / "scratch"
        scratch.mkdir()
        package = build_package(workdir / "package.zip", blob_mib)
        compression = entry_compression(package.path)
        with ZooKeeperCluster(size=1) as zk:
            zk_version = zookeeper_version(zk.client_ports[0])
            cluster = Cluster(
                zookeeper=zk.connect_string,
                root=f"/bench-{uuid.uuid4().hex[:12]}",
                workdir=workdir,
            )
            try:
                for _ in range(REPLICAS):
                    cluster.start_replica()
                leader = cluster.wait_ready()
                submitted = submit_and_wait(cluster, leader, package)
                time.sleep(SETTLE_S)
                series = measure(leader, package, scratch, rounds, WARMUP_ROUNDS)
            except BaseException:
                print(f"bench/code_sync.py: replica logs:\n{cluster.tails()}", file=sys.stderr)
                raise
            finally:
                cluster.shutdown()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return report(
        series,
        package,
        submitted,
        compression=compression,
        source=leader.address,
        rounds=rounds,
        warmup=WARMUP_ROUNDS,
        quick=quick,
        zk_version=zk_version,
        load_start=load_start,
        elapsed_s=time.monotonic() - began,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=(
            f"a {QUICK_BLOB_MIB} MiB blob and {QUICK_REPETITIONS} rounds instead of "
            f"{FULL_BLOB_MIB} MiB and {FULL_REPETITIONS} (under two minutes)"
        ),
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    result = run(quick=args.quick)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
