"""What bench/leader_failover.py measures, as records (a series of calls, a failover trial),
and the tables and JSON made of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _common import (
    BenchRun,
    Summary,
    print_table,
    summarize_ms,
    summarize_ns,
)

REPLICAS = 3
BLOCK = 100  # calls of one kind in a row before switching to the other
POLL_INTERVAL_S = 0.002
LEADER_CALL = "GetLeaderAddress"
EMPTY_CALL = "empty: health Check(service='')"


@dataclass(frozen=True)
class CallSeries:
    samples_ns: list[int]
    wall_ns: int  # time spent in this series' blocks, for calls per second

    @property
    def per_s(self) -> float:
        return len(self.samples_ns) / (self.wall_ns / 1e9)


@dataclass(frozen=True)
class Trial:
    failover_s: float  # signal -> both survivors name the same new leader, higher epoch
    first_seen_s: float  # signal -> the first survivor names it
    old_epoch: int
    new_epoch: int
    exit_code: int | None
    replacement_ready_s: float  # replacement start -> all three listed, leader agreed


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
    session_timeout: float,
    zk_version: str,
    notes: list[str],
    bench_run: BenchRun,
) -> dict[str, Any]:
    session_ms = session_timeout * 1000
    lat = {name: summarize_ns(series.samples_ns) for name, series in calls.items()}
    empty_p50 = lat[EMPTY_CALL].p50_ms

    print(
        f"leader discovery and failover ({bench_run.mode}): {REPLICAS} `nimbus serve` replicas, "
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
    footer = bench_run.footer()

    g = _ms(graceful, lambda t: t.failover_s)
    k = _ms(killed, lambda t: t.failover_s)
    leader_s, empty_s = lat[LEADER_CALL], lat[EMPTY_CALL]
    result: dict[str, Any] = {
        "benchmark": "leader",
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
        **footer,
    }
    return result
