"""What fencing costs: a fenced write against a bare write and the racy check-then-write.

Starts its own standalone ZooKeeper, takes the leader lock and office like a real leader,
then times three ways of writing one node, interleaved round-robin in one run so drift
(JIT, GC, page cache, a noisy neighbour) affects all three alike:

* fenced:           ``FencedWriter.set`` - one multi-op, check(own lock node) + setData;
* bare:             ``client.set`` - one setData, no fencing at all;
* check-then-write: ``client.exists(lock node)`` then ``client.set`` - two round trips,
  and still racy: the lock node can vanish between them.

Run from the repo root: ``python bench/fencing_cost.py [--quick]``. The last line of stdout
is one JSON object with the figures.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import (
    BenchRun,
    Summary,
    bench_parser,
    machine_facts,
    print_json,
    print_table,
    summarize_ns,
)
from _replicas import zookeeper_version
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from devtools.zkserver import ZooKeeperCluster
from fencing.office import take_office
from fencing.token import LeadershipToken
from fencing.writer import FencedWriter

ROOT = "/bench"
LOCK_PATH = f"{ROOT}/leader-lock"
DATA_ROOT = f"{ROOT}/data"
HOLDER = "bench-fencing"
PAYLOAD = bytes(range(256))  # 256 bytes: about one small protobuf record
SESSION_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 5.0

FULL_ITERATIONS = 2000
FULL_WARMUP = 300
QUICK_ITERATIONS = 300
QUICK_WARMUP = 100

FENCED = "fenced"
BARE = "bare"
CHECK_THEN_WRITE = "check-then-write"
METHODS = (FENCED, BARE, CHECK_THEN_WRITE)
DESCRIPTIONS = {
    FENCED: "multi(check lock, set)",
    BARE: "set",
    CHECK_THEN_WRITE: "exists(lock); set",
}

Operation = Callable[[], None]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def take_leadership(client: KazooClient) -> tuple[Lock, FencedWriter]:
    """Take the lock and office exactly as a replica does; returns the lock and a writer."""
    client.ensure_path(LOCK_PATH)
    client.ensure_path(Paths(ROOT).epochs)
    lock = Lock(client, LOCK_PATH, identifier=HOLDER)
    if not lock.acquire(timeout=30):
        raise RuntimeError(f"could not take {LOCK_PATH} within 30 s")
    lock_node = Paths(ROOT).lock_node_of(lock)
    if lock_node is None:
        raise RuntimeError(f"acquired {LOCK_PATH} without a lock node")
    epoch = take_office(
        client,
        Paths(ROOT),
        lock_node=lock_node,
        holder=HOLDER,
        now_ms=_now_ms,
        timeout=WRITE_TIMEOUT_S,
    )
    return lock, FencedWriter(client, LeadershipToken(lock_node, epoch), timeout=WRITE_TIMEOUT_S)


def operations(client: KazooClient, writer: FencedWriter) -> dict[str, Operation]:
    """One write per method, each to its own node so no method sees another's versions."""
    lock_node = writer.token.lock_node
    paths = {name: f"{DATA_ROOT}/{name}" for name in METHODS}
    for path in paths.values():
        client.ensure_path(path)

    def fenced() -> None:
        writer.set(paths[FENCED], PAYLOAD)

    def bare() -> None:
        client.set(paths[BARE], PAYLOAD)

    def check_then_write() -> None:
        if client.exists(lock_node) is None:
            raise RuntimeError(f"lock node {lock_node} vanished during the benchmark")
        client.set(paths[CHECK_THEN_WRITE], PAYLOAD)

    return {FENCED: fenced, BARE: bare, CHECK_THEN_WRITE: check_then_write}


def measure(ops: dict[str, Operation], iterations: int, warmup: int) -> dict[str, list[int]]:
    """Round-robin over the methods, rotating which goes first, after an untimed warm-up.

    Returns latencies in nanoseconds per method, in iteration order.
    """
    names = list(ops)
    for i in range(warmup):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            ops[name]()
    gc.collect()
    samples: dict[str, list[int]] = {name: [] for name in names}
    clock = time.perf_counter_ns
    for i in range(iterations):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            op = ops[name]
            start = clock()
            op()
            samples[name].append(clock() - start)
    return samples


def verify_writes(client: KazooClient, expected: int) -> None:
    """Every timed call really wrote: each node's version counts all writes made to it."""
    for name in METHODS:
        _, stat = client.get(f"{DATA_ROOT}/{name}")
        if stat.version != expected:
            raise RuntimeError(f"{name}: node version {stat.version}, expected {expected}")


def report(
    summaries: dict[str, Summary],
    *,
    iterations: int,
    warmup: int,
    force_sync: bool,
    zk_version: str,
    bench_run: BenchRun,
) -> dict[str, Any]:
    bare_p50 = summaries[BARE].p50_ms
    facts = machine_facts()
    elapsed_s = time.monotonic() - bench_run.began
    print(
        f"fencing cost: {iterations} iterations per method ({bench_run.mode}), {warmup} warm-up, "
        f"{len(PAYLOAD)}-byte payload, standalone ZooKeeper {zk_version} on loopback, "
        f"forceSync={'yes' if force_sync else 'no'}"
    )
    print()
    rows: list[list[object]] = []
    for name in METHODS:
        s = summaries[name]
        rows.append(
            [
                name,
                DESCRIPTIONS[name],
                s.p50_ms,
                s.p90_ms,
                s.p99_ms,
                s.mean_ms,
                f"{s.p50_ms / bare_p50:.2f}x",
            ]
        )
    print_table(
        ["method", "operations", "p50 ms", "p90 ms", "p99 ms", "mean ms", "p50 / bare"],
        rows,
        align="llrrrrr",
    )
    print()
    print(facts.line())
    print(f"wall time {elapsed_s:.1f} s including ZooKeeper startup")
    result: dict[str, Any] = {
        "benchmark": "fencing",
        "iterations": iterations,
        "warmup": warmup,
        "quick": bench_run.quick,
        "force_sync": force_sync,
        "zookeeper_version": zk_version,
        "payload_bytes": len(PAYLOAD),
    }
    keys = {FENCED: "fenced", BARE: "bare", CHECK_THEN_WRITE: "check_then_write"}
    for name, key in keys.items():
        s = summaries[name]
        result[f"{key}_p50_ms"] = round(s.p50_ms, 4)
        result[f"{key}_p90_ms"] = round(s.p90_ms, 4)
        result[f"{key}_p99_ms"] = round(s.p99_ms, 4)
        result[f"{key}_mean_ms"] = round(s.mean_ms, 4)
    result["fenced_over_bare"] = round(summaries[FENCED].p50_ms / bare_p50, 3)
    result["check_then_write_over_bare"] = round(summaries[CHECK_THEN_WRITE].p50_ms / bare_p50, 3)
    result["machine"] = facts.as_dict()
    result["wall_s"] = round(elapsed_s, 2)
    return result


def run(*, quick: bool, force_sync: bool) -> dict[str, Any]:
    bench_run = BenchRun.start(quick=quick)
    iterations = QUICK_ITERATIONS if quick else FULL_ITERATIONS
    warmup = QUICK_WARMUP if quick else FULL_WARMUP
    with ZooKeeperCluster(size=1, force_sync=force_sync) as zk:
        zk_version = zookeeper_version(zk.client_ports[0])
        client = make_kazoo_client(zk.connect_string, session_timeout=SESSION_TIMEOUT_S)
        client.start(timeout=30)
        try:
            lock, writer = take_leadership(client)
            try:
                samples = measure(operations(client, writer), iterations, warmup)
                verify_writes(client, warmup + iterations)
            finally:
                lock.release()
        finally:
            client.stop()
            client.close()
    summaries = {name: summarize_ns(s) for name, s in samples.items()}
    return report(
        summaries,
        iterations=iterations,
        warmup=warmup,
        force_sync=force_sync,
        zk_version=zk_version,
        bench_run=bench_run,
    )


def main(argv: list[str] | None = None) -> int:
    quick_help = f"{QUICK_ITERATIONS} iterations instead of {FULL_ITERATIONS} (under a minute)"
    parser = bench_parser(__doc__, quick_help)
    parser.add_argument(
        "--force-sync",
        action="store_true",
        help="run ZooKeeper with forceSync=yes (fsync every write, as in production)",
    )
    args = parser.parse_args(argv)
    print_json(run(quick=args.quick, force_sync=args.force_sync))
    return 0


if __name__ == "__main__":
    sys.exit(main())
