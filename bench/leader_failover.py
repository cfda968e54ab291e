"""What leader discovery and failover cost, measured on real replica processes.

Starts its own standalone ZooKeeper and three ``nimbus serve`` replicas (each its own
process, on loopback, under a fresh ``--root /bench-<uuid>``), then measures in one run:

* discovery: ``GetLeaderAddress`` on one replica (the leader) against the standard gRPC
  health ``Check`` with service ``""`` on the same server, the cheapest call it serves,
  as the "empty" baseline. Sequential calls on one channel after a warm-up, the two
  interleaved in blocks so drift affects both alike;
* graceful failover: SIGTERM the leader; the time from the signal until both surviving
  replicas name the same *other* replica as leader with a higher epoch (polled every
  ~2 ms, monotonic clock). A replacement replica (new port) is then started and the
  next trial waits until every live replica lists all three;
* SIGKILL failover: the same with SIGKILL, where the lock node only goes when
  ZooKeeper expires the dead session: about one session timeout.

Run from the repo root: ``python bench/leader_failover.py [--quick] [--preemption]``. The
last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _common import (
    BenchError,
    BenchRun,
    bench_parser,
    exit_on_sigterm,
    machine_facts,
    percentile,
    print_json,
    print_table,
)
from _leader_cluster import Cluster, Replica
from _leader_figures import (
    BLOCK,
    EMPTY_CALL,
    LEADER_CALL,
    POLL_INTERVAL_S,
    REPLICAS,
    CallSeries,
    Trial,
    report,
)
from _replicas import fresh_bed
from grpc_health.v1 import health_pb2

from cluster.api import pb
from devtools.zkserver import ZooKeeperCluster

DEFAULT_SESSION_TIMEOUT_S = 4.0

FULL_CALLS = 3000
FULL_WARMUP = 300
FULL_TRIALS = 20
QUICK_CALLS = 500
QUICK_WARMUP = 100
QUICK_TRIALS = 5

EXIT_TIMEOUT_S = 20.0


_SERVING = health_pb2.HealthCheckResponse.SERVING


# -- discovery latency ------------------------------------------------------------------


def measure_calls(replica: Replica, calls: int, warmup: int) -> dict[str, CallSeries]:
    """Sequential unary calls on one channel, the two kinds in alternating blocks."""
    stub = replica.stub()
    health = replica.health_stub()
    leader_request = pb.GetLeaderAddressRequest()
    health_request = health_pb2.HealthCheckRequest(service="")

    def leader_call() -> None:
        reply = stub.GetLeaderAddress(leader_request, timeout=5.0)
        if not reply.responder_is_leader:
            raise BenchError(f"{replica.address} stopped being the leader during the test")

    def empty_call() -> None:
        reply = health.Check(health_request, timeout=5.0)
        if reply.status != _SERVING:
            raise BenchError(f"{replica.address} stopped SERVING during the test")

    ops: dict[str, Callable[[], None]] = {LEADER_CALL: leader_call, EMPTY_CALL: empty_call}
    names = list(ops)
    for i in range(warmup):
        for name in names[i % 2 :] + names[: i % 2]:
            ops[name]()
    gc.collect()
    samples: dict[str, list[int]] = {name: [] for name in names}
    walls = dict.fromkeys(names, 0)
    clock = time.perf_counter_ns
    blocks = -(-calls // BLOCK)
    for b in range(blocks):
        size = min(BLOCK, calls - b * BLOCK)
        for name in names[b % 2 :] + names[: b % 2]:
            op, out = ops[name], samples[name]
            began = clock()
            for _ in range(size):
                start = clock()
                op()
                out.append(clock() - start)
            walls[name] += clock() - began
    return {name: CallSeries(samples[name], walls[name]) for name in names}


# -- failover ---------------------------------------------------------------------------


def failover_trial(cluster: Cluster, signum: signal.Signals) -> Trial:
    leader = cluster.wait_ready()
    old = cluster.by_address(leader.replica_id)
    survivors = [r for r in cluster.live if r is not old]
    timeout = 3 * cluster.session_timeout + 10.0
    first_seen: float | None = None
    agreed: pb.GetLeaderAddressResponse | None = None
    began = time.monotonic()
    os.kill(old.pid, signum)
    while True:
        replies = [r.leader_reply() for r in survivors]
        now = time.monotonic()
        fresh = [
            reply
            for reply in replies
            if reply is not None and reply.replica_id != old.address and reply.epoch > leader.epoch
        ]
        if fresh and first_seen is None:
            first_seen = now - began
        if (
            len(fresh) == len(survivors)
            and len({(reply.replica_id, reply.epoch) for reply in fresh}) == 1
        ):
            agreed = fresh[0]
            break
        if now - began > timeout:
            raise BenchError(
                f"no new leader {timeout:.0f} s after {signum.name} to {old.address}\n"
                f"{cluster.tails()}"
            )
        time.sleep(POLL_INTERVAL_S)
    took = now - began
    exit_code = old.wait_exit(EXIT_TIMEOUT_S)
    if exit_code is None:
        cluster.notes.append(
            f"{old.address} still running {EXIT_TIMEOUT_S:.0f} s after {signum.name}"
        )
        exit_code = old.returncode
    expected_code = 0 if signum == signal.SIGTERM else -signal.SIGKILL
    if exit_code != expected_code:
        cluster.notes.append(
            f"{old.address} exited with {exit_code} after {signum.name} (expected {expected_code})"
        )
    old.close()
    cluster.remove(old)
    replacement = cluster.start_replica()
    cluster.wait_ready(newer_than=agreed.epoch - 1)
    ready = time.monotonic() - replacement.started
    return Trial(
        failover_s=took,
        first_seen_s=first_seen if first_seen is not None else took,
        old_epoch=leader.epoch,
        new_epoch=agreed.epoch,
        exit_code=exit_code,
        replacement_ready_s=ready,
    )


def run_trials(cluster: Cluster, signum: signal.Signals, trials: int) -> list[Trial]:
    done: list[Trial] = []
    for i in range(trials):
        trial = failover_trial(cluster, signum)
        done.append(trial)
        print(
            f"  {signum.name} trial {i + 1:2d}/{trials}: new leader agreed after "
            f"{trial.failover_s * 1000:8.1f} ms (first seen {trial.first_seen_s * 1000:8.1f} ms), "
            f"epoch {trial.old_epoch} -> {trial.new_epoch}; "
            f"replacement ready in {trial.replacement_ready_s:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    return done


def run(*, quick: bool, session_timeout: float) -> dict[str, Any]:
    bench_run = BenchRun.start(quick=quick)
    iterations = QUICK_CALLS if quick else FULL_CALLS
    warmup = QUICK_WARMUP if quick else FULL_WARMUP
    trials = QUICK_TRIALS if quick else FULL_TRIALS
    with fresh_bed("leader") as (bed, zk_version):
        cluster = Cluster(bed.zookeeper, bed.root, bed.workdir, session_timeout=session_timeout)
        try:
            for _ in range(REPLICAS):
                cluster.start_replica()
            leader = cluster.wait_ready()
            target = cluster.by_address(leader.replica_id)
            calls = measure_calls(target, iterations, warmup)
            graceful = run_trials(cluster, signal.SIGTERM, trials)
            killed = run_trials(cluster, signal.SIGKILL, trials)
        finally:
            cluster.shutdown()
    return report(
        calls,
        graceful,
        killed,
        target=target.address,
        iterations=iterations,
        warmup=warmup,
        trials=trials,
        session_timeout=session_timeout,
        zk_version=zk_version,
        notes=cluster.notes,
        bench_run=bench_run,
    )


PREEMPTION_TIMEOUTS_S = (4.0, 20.0)
PREEMPTION_TRIALS = 5
PREEMPTION_QUICK_TRIALS = 2


def run_preemption(*, quick: bool) -> dict[str, Any]:
    """SIGKILL failover with and without fenced preemption, at T = 4 s and 20 s."""
    trials = PREEMPTION_QUICK_TRIALS if quick else PREEMPTION_TRIALS
    rows: dict[str, dict[str, float]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="nimbus-bench-preempt-"))
    try:
        with ZooKeeperCluster(size=1) as zk:
            for session_timeout in PREEMPTION_TIMEOUTS_S:
                for window, mode in ((0.5, "preemption"), (0.0, "expiry")):
                    cluster = Cluster(
                        zookeeper=zk.connect_string,
                        root=f"/bench-{uuid.uuid4().hex[:12]}",
                        workdir=workdir,
                        session_timeout=session_timeout,
                        extra=("--preempt-window", str(window)),
                    )
                    try:
                        for _ in range(REPLICAS):
                            cluster.start_replica()
                        cluster.wait_ready()
                        killed = run_trials(cluster, signal.SIGKILL, trials)
                    finally:
                        cluster.shutdown()
                    took = [k.failover_s for k in killed]
                    rows[f"T{session_timeout:g}_{mode}"] = {
                        "session_timeout_s": session_timeout,
                        "p50_s": round(percentile(took, 50), 3),
                        "p99_s": round(percentile(took, 99), 3),
                        "p99_over_T": round(percentile(took, 99) / session_timeout, 3),
                    }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(
        ["case", "SIGKILL failover p50 s", "p99 s", "p99 / T"],
        [[k, v["p50_s"], v["p99_s"], v["p99_over_T"]] for k, v in rows.items()],
    )
    return {"benchmark": "leader-preemption", "trials": trials, "sigkill": rows,
            "machine": asdict(machine_facts())}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    quick_help = (
        f"{QUICK_CALLS} calls and {QUICK_TRIALS} failovers of each kind instead of "
        f"{FULL_CALLS} and {FULL_TRIALS} (under two minutes)"
    )
    parser = bench_parser(__doc__, quick_help)
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=DEFAULT_SESSION_TIMEOUT_S,
        help=(
            "replicas' ZooKeeper session timeout in seconds "
            f"(default {DEFAULT_SESSION_TIMEOUT_S:g})"
        ),
    )
    parser.add_argument(
        "--preemption",
        action="store_true",
        help="only SIGKILL failover, with and without preemption, at T = 4 s and 20 s",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    if args.preemption:
        print_json(run_preemption(quick=args.quick))
    else:
        print_json(run(quick=args.quick, session_timeout=args.session_timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
