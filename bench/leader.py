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

Run from the repo root: ``python bench/leader.py [--quick]``. The last line of stdout is
one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _replicas
from _common import (
    BenchError,
    Summary,
    exit_on_sigterm,
    free_port,
    load_1min,
    machine_facts,
    percentile,
    print_table,
    summarize_ms,
    summarize_ns,
)
from _replicas import serve_command, stop_all, tails, zookeeper_version
from grpc_health.v1 import health_pb2

from cluster.api import pb
from devtools.zkserver import ZooKeeperCluster

REPLICAS = 3
DEFAULT_SESSION_TIMEOUT_S = 4.0

FULL_CALLS = 3000
FULL_WARMUP = 300
FULL_TRIALS = 20
QUICK_CALLS = 500
QUICK_WARMUP = 100
QUICK_TRIALS = 5
BLOCK = 100  # calls of one kind in a row before switching to the other

POLL_INTERVAL_S = 0.002
POLL_RPC_TIMEOUT_S = 0.5
READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.02
EXIT_TIMEOUT_S = 20.0

LEADER_CALL = "GetLeaderAddress"
EMPTY_CALL = "empty: health Check(service='')"

_SERVING = health_pb2.HealthCheckResponse.SERVING


# -- replicas as processes --------------------------------------------------------------


@dataclass
class Replica(_replicas.Replica):
    attempt: int = 1
    ready: bool = False  # has been part of a ready cluster


@dataclass
class Cluster:
    """The bench's replicas: ``live`` ones take part; ``every`` one is cleaned up."""

    zookeeper: str
    root: str
    workdir: Path
    session_timeout: float
    live: list[Replica] = field(default_factory=list)
    every: list[Replica] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: tuple[str, ...] = ()  # more ``nimbus serve`` flags

    def start_replica(self, *, attempt: int = 1) -> Replica:
        """Start one replica on a fresh port (``wait_ready`` retries one that dies at once)."""
        port = free_port()
        log_path = self.workdir / f"replica-{port}.log"
        replica = Replica(port, log_path, rpc_timeout=POLL_RPC_TIMEOUT_S, attempt=attempt)
        replica.launch(
            serve_command(
                zookeeper=self.zookeeper,
                root=self.root,
                listen=replica.address,
                session_timeout=self.session_timeout,
                code_dir=self.workdir / f"code-{port}",
                extra=self.extra,
            )
        )
        self.every.append(replica)
        self.live.append(replica)
        return replica

    def _replace_failed_start(self, replica: Replica) -> Replica:
        """A replica that died before it ever served: once more on a new port, else fail."""
        self.notes.append(
            f"replica {replica.address} exited with {replica.returncode} before serving "
            f"(attempt {replica.attempt}): {replica.log_tail(3)!r}"
        )
        if replica.ready or replica.attempt >= 2:
            raise BenchError(
                f"replica {replica.address} exited with {replica.returncode}\n"
                f"{replica.log_tail(25)}"
            )
        self.remove(replica)
        return self.start_replica(attempt=replica.attempt + 1)

    def remove(self, replica: Replica) -> None:
        self.live.remove(replica)

    def by_address(self, address: str) -> Replica:
        for replica in self.live:
            if replica.address == address:
                return replica
        raise BenchError(f"the leader {address} is not one of the live replicas")

    def agreed_leader(self, replicas: list[Replica]) -> pb.GetLeaderAddressResponse | None:
        """The leader every given replica names identically, else None."""
        first: pb.GetLeaderAddressResponse | None = None
        for replica in replicas:
            reply = replica.leader_reply()
            if reply is None:
                return None
            if first is None:
                first = reply
            elif (reply.replica_id, reply.epoch) != (first.replica_id, first.epoch):
                return None
        return first

    def wait_ready(self, *, newer_than: int = 0) -> pb.GetLeaderAddressResponse:
        """Until every live replica serves, lists exactly the live set and names one leader."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for replica in list(self.live):
                if not replica.alive():
                    self._replace_failed_start(replica)
            expected = frozenset(r.address for r in self.live)
            if all(r.listening() and r.serving() for r in self.live) and all(
                r.registered() == expected for r in self.live
            ):
                leader = self.agreed_leader(self.live)
                if leader is not None and leader.epoch > newer_than:
                    if leader.replica_id not in expected:
                        raise BenchError(f"agreed leader {leader.replica_id} is not live")
                    for replica in self.live:
                        replica.ready = True
                    return leader
            time.sleep(READY_POLL_S)
        raise BenchError(
            f"the cluster did not become ready in {READY_TIMEOUT_S:.0f} s\n{self.tails()}"
        )

    def tails(self) -> str:
        return tails(self.live)

    def shutdown(self) -> None:
        stop_all(self.every, grace=10.0)
        self.live.clear()


# -- discovery latency ------------------------------------------------------------------


@dataclass(frozen=True)
class CallSeries:
    samples_ns: list[int]
    wall_ns: int  # time spent in this series' blocks, for calls per second

    @property
    def per_s(self) -> float:
        return len(self.samples_ns) / (self.wall_ns / 1e9)


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


@dataclass(frozen=True)
class Trial:
    failover_s: float  # signal -> both survivors name the same new leader, higher epoch
    first_seen_s: float  # signal -> the first survivor names it
    old_epoch: int
    new_epoch: int
    exit_code: int | None
    replacement_ready_s: float  # replacement start -> all three listed, leader agreed


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


# -- report -----------------------------------------------------------------------------


def _ms(trials: list[Trial], pick: Callable[[Trial], float]) -> Summary:
    return summarize_ms([pick(t) * 1000 for t in trials])


def report(
    calls: dict[str, CallSeries],
    graceful: list[Trial],
    killed: list[Trial],
    *,
    target: str,
    iterations: int,
    warmup: int,
    trials: int,
    quick: bool,
    session_timeout: float,
    zk_version: str,
    notes: list[str],
    load_start: float,
    elapsed_s: float,
) -> dict[str, Any]:
    facts = machine_facts()
    mode = "quick" if quick else "full"
    session_ms = session_timeout * 1000
    lat = {name: summarize_ns(series.samples_ns) for name, series in calls.items()}
    empty_p50 = lat[EMPTY_CALL].p50_ms

    print(
        f"leader discovery and failover ({mode}): {REPLICAS} `nimbus serve` replicas, "
        f"standalone ZooKeeper {zk_version} on loopback, session timeout {session_timeout:g} s"
    )
    print()
    print(
        f"discovery on one replica (the leader, {target}): {iterations} sequential calls of "
        f"each kind on one channel, {warmup} warm-up, interleaved in blocks of {BLOCK}; "
        'the empty call is the standard gRPC health Check (grpc.health.v1, service "") '
        "on the same server"
    )
    rows: list[list[object]] = []
    for name, s in lat.items():
        rows.append(
            [
                name,
                s.p50_ms,
                s.p90_ms,
                s.p99_ms,
                s.mean_ms,
                f"{calls[name].per_s:,.0f}",
                f"{s.p50_ms / empty_p50:.2f}x",
            ]
        )
    print_table(["call", "p50 ms", "p90 ms", "p99 ms", "mean ms", "calls/s", "p50 / empty"], rows)
    print()
    print(
        f"failover: {trials} trials each; time from the signal to the leader until both "
        "surviving replicas name the same other replica with a higher epoch (polled every "
        f"{POLL_INTERVAL_S * 1000:.0f} ms); 'first seen' is when the first survivor names it"
    )
    frows: list[list[object]] = []
    for label, done in (("SIGTERM (graceful)", graceful), ("SIGKILL", killed)):
        s = _ms(done, lambda t: t.failover_s)
        first = _ms(done, lambda t: t.first_seen_s)
        frows.append(
            [
                label,
                f"{first.p50_ms:.1f}",
                f"{s.p50_ms:.1f}",
                f"{s.p90_ms:.1f}",
                f"{s.p99_ms:.1f}",
                f"{s.max_ms:.1f}",
                f"{s.p50_ms / session_ms:.3f}",
                f"{s.p99_ms / session_ms:.3f}",
            ]
        )
    print_table(
        [
            "leader stopped by",
            "first seen p50 ms",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "p50 / session",
            "p99 / session",
        ],
        frows,
    )
    ready = _ms(graceful + killed, lambda t: t.replacement_ready_s)
    print()
    print(
        f"replacement replica (process start until all three list it and agree on the "
        f"leader): p50 {ready.p50_ms / 1000:.2f} s, max {ready.max_ms / 1000:.2f} s"
    )
    for note in notes:
        print(f"note: {note}")
    print()
    load_end = load_1min()
    print(facts.line())
    print(
        f"load average (1 min) {load_start:.2f} at start, {load_end:.2f} at end; wall time "
        f"{elapsed_s:.1f} s including ZooKeeper and replica startup"
    )

    g = _ms(graceful, lambda t: t.failover_s)
    k = _ms(killed, lambda t: t.failover_s)
    leader_s, empty_s = lat[LEADER_CALL], lat[EMPTY_CALL]
    result: dict[str, Any] = {
        "benchmark": "leader",
        "quick": quick,
        "replicas": REPLICAS,
        "calls": iterations,
        "warmup": warmup,
        "trials": trials,
        "session_timeout_s": session_timeout,
        "zookeeper_version": zk_version,
        "empty_rpc": "grpc.health.v1.Health/Check service=''",
        "leader_rpc_p50_ms": round(leader_s.p50_ms, 4),
        "leader_rpc_p90_ms": round(leader_s.p90_ms, 4),
        "leader_rpc_p99_ms": round(leader_s.p99_ms, 4),
        "leader_rpc_per_s": round(calls[LEADER_CALL].per_s, 1),
        "empty_rpc_p50_ms": round(empty_s.p50_ms, 4),
        "empty_rpc_p90_ms": round(empty_s.p90_ms, 4),
        "empty_rpc_p99_ms": round(empty_s.p99_ms, 4),
        "empty_rpc_per_s": round(calls[EMPTY_CALL].per_s, 1),
        "leader_over_empty": round(leader_s.p50_ms / empty_s.p50_ms, 3),
        "graceful_failover_p50_ms": round(g.p50_ms, 2),
        "graceful_failover_p99_ms": round(g.p99_ms, 2),
        "graceful_failover_max_ms": round(g.max_ms, 2),
        "graceful_failover_over_session": round(g.p50_ms / session_ms, 4),
        "kill_failover_p50_s": round(k.p50_ms / 1000, 4),
        "kill_failover_p99_s": round(k.p99_ms / 1000, 4),
        "kill_failover_max_s": round(k.max_ms / 1000, 4),
        "kill_failover_over_session": round(k.p50_ms / session_ms, 4),
        "kill_failover_p99_over_session": round(k.p99_ms / session_ms, 4),
        "replacement_ready_p50_s": round(ready.p50_ms / 1000, 3),
        "graceful_failover_ms": [round(t.failover_s * 1000, 2) for t in graceful],
        "kill_failover_s": [round(t.failover_s, 4) for t in killed],
        "notes": notes,
        "machine": facts.as_dict(),
        "load_1min_start": round(load_start, 2),
        "load_1min_end": round(load_end, 2),
        "wall_s": round(elapsed_s, 2),
    }
    return result


def run(*, quick: bool, session_timeout: float) -> dict[str, Any]:
    began = time.monotonic()
    load_start = load_1min()
    iterations = QUICK_CALLS if quick else FULL_CALLS
    warmup = QUICK_WARMUP if quick else FULL_WARMUP
    trials = QUICK_TRIALS if quick else FULL_TRIALS
    workdir = Path(tempfile.mkdtemp(prefix="nimbus-bench-leader-"))
    ok = False
    try:
        with ZooKeeperCluster(size=1) as zk:
            zk_version = zookeeper_version(zk.client_ports[0])
            cluster = Cluster(
                zookeeper=zk.connect_string,
                root=f"/bench-{uuid.uuid4().hex[:12]}",
                workdir=workdir,
                session_timeout=session_timeout,
            )
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
        ok = True
    finally:
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"bench/leader.py: replica logs kept in {workdir}", file=sys.stderr)
    return report(
        calls,
        graceful,
        killed,
        target=target.address,
        iterations=iterations,
        warmup=warmup,
        trials=trials,
        quick=quick,
        session_timeout=session_timeout,
        zk_version=zk_version,
        notes=cluster.notes,
        load_start=load_start,
        elapsed_s=time.monotonic() - began,
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=(
            f"{QUICK_CALLS} calls and {QUICK_TRIALS} failovers of each kind instead of "
            f"{FULL_CALLS} and {FULL_TRIALS} (under two minutes)"
        ),
    )
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
        print(json.dumps(run_preemption(quick=args.quick), sort_keys=True), flush=True)
        return 0
    result = run(quick=args.quick, session_timeout=args.session_timeout)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
