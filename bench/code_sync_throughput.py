"""What syncing a package between replicas costs, against a raw socket doing the same work.

Makes a topology package (``make_package``: ``topology.py`` and an incompressible
``os.urandom`` blob of 64 MiB, ``--quick`` too), starts its own standalone
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

Run from the repo root: ``python bench/code_sync_throughput.py [--quick]``. The last line of
stdout is one JSON object with the figures.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _code_sync_cluster import (
    BLOB_ENTRY,
    REPLICAS,
    Cluster,
    Package,
    Replica,
    Submitted,
    build_package,
    entry_compression,
    submit_and_wait,
)
from _code_sync_transfers import (
    FETCH_TIMEOUT_S,
    MAX_PACKAGE_BYTES,
    RawServer,
    raw_once,
    sync_once,
)
from _common import (
    BenchRun,
    bench_parser,
    exit_on_sigterm,
    percentile,
    print_json,
    print_table,
)
from _replicas import zookeeper_version

from code_sync.package import validate_package
from code_sync.peer import fetch_from_peer
from devtools.zkserver import ZooKeeperCluster

FULL_BLOB_MIB = 64
FULL_REPETITIONS = 5
QUICK_REPETITIONS = 3
WARMUP_ROUNDS = 1


SETTLE_S = 1.5  # after e2e: lets the replicas' first verifications of the new file finish
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
    zk_version: str,
    bench_run: BenchRun,
) -> dict[str, Any]:
    mib = package.mib
    rates = {name: s.mib_per_s(mib) for name, s in series.items()}
    p50_rate = {name: percentile(r, 50) for name, r in rates.items()}
    best_rate = {name: max(r) for name, r in rates.items()}
    p50_s = {name: percentile(s.seconds, 50) for name, s in series.items()}
    ratio = p50_rate[SYNC] / p50_rate[RAW]

    print(
        f"code sync throughput ({bench_run.mode}): a {mib:.2f} MiB package ({package.size} bytes; "
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
    return {
        "benchmark": "code_sync",
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
        **bench_run.footer(),
    }


def run(*, quick: bool) -> dict[str, Any]:
    bench_run = BenchRun.start(quick=quick)
    rounds = QUICK_REPETITIONS if quick else FULL_REPETITIONS
    blob_mib = FULL_BLOB_MIB  # --quick measures the same transfer, fewer rounds
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
                leader, _ = cluster.wait_ready()
                submitted = submit_and_wait(cluster, leader, package)
                time.sleep(SETTLE_S)
                series = measure(leader, package, scratch, rounds, WARMUP_ROUNDS)
            except BaseException:
                print(
                    f"bench/code_sync_throughput.py: replica logs:\n{cluster.tails()}",
                    file=sys.stderr,
                )
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
        zk_version=zk_version,
        bench_run=bench_run,
    )


def main(argv: list[str] | None = None) -> int:
    quick_help = (
        f"{QUICK_REPETITIONS} rounds instead of {FULL_REPETITIONS}, the same "
        f"{FULL_BLOB_MIB} MiB package (under a minute)"
    )
    args = bench_parser(__doc__, quick_help).parse_args(argv)
    exit_on_sigterm()
    print_json(run(quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
