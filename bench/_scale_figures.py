"""What bench/scale.py measures, as records (a failover trial, one N's figures), and the
tables and JSON made of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from _common import BenchRun, percentile, print_table
from _scale_cluster import REPLICAS, SESSION_TIMEOUT_S, SYNC_INTERVAL_S

TARGET_RATIO = 1.5
SETTLE_S = 2.0  # after ready, before RSS or a trial: first scheduler and sync passes done
STEADY_AFTER_S = 40.0  # after ready: start-up work long done, a periodic full sync pass due
STEADY_WINDOW_S = 20.0  # CPU measured over this long in the steady state


@dataclass(frozen=True)
class Trial:
    answered_s: float  # signal -> GetLeaderAddress on the survivor names it, higher epoch
    wrote_s: float  # signal -> a write through the survivor returned OK
    write_attempts: int
    old_epoch: int
    new_epoch: int
    action: str
    steps: dict[str, float]  # from the new leader's log, seconds after the signal
    exit_code: int | None
    restart_ready_s: float  # restart of the stopped replica -> both ready again


@dataclass
class SizeResult:
    n: int
    root: str
    seed_s: float
    first_ready_s: float  # both replicas launched -> ready (cache loaded, registered, queued)
    leader_rss_mib: float | None
    follower_rss_mib: float | None
    leader_rss_after_mib: float | None  # the leader at the end, after all the failovers
    leader_idle_cpu: float | None  # CPU seconds per second over SETTLE_S after ready
    follower_idle_cpu: float | None
    leader_steady_cpu: float | None  # the same from STEADY_AFTER_S, over STEADY_WINDOW_S
    follower_steady_cpu: float | None
    trials: list[Trial]

    def p50_ms(self, pick: str) -> float:
        return percentile([getattr(t, pick) * 1000 for t in self.trials], 50)

    def min_ms(self, pick: str) -> float:
        return float(min(getattr(t, pick) * 1000 for t in self.trials))

    def max_ms(self, pick: str) -> float:
        return float(max(getattr(t, pick) * 1000 for t in self.trials))

    def step_p50_ms(self, step: str) -> float | None:
        got = [t.steps[step] * 1000 for t in self.trials if step in t.steps]
        return percentile(got, 50) if got else None

    def leading_to_write_ms(self) -> list[float]:
        """Per trial: from "leading with epoch" (writes accepted) to the write's OK."""
        return [
            (t.wrote_s - t.steps["leading"]) * 1000 for t in self.trials if "leading" in t.steps
        ]


# -- report -------------------------------------------------------------------------------


def _pct(fraction: float | None) -> str:
    return _cell(None if fraction is None else 100 * fraction, ".1f")


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _cell(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def report(
    results: list[SizeResult],
    *,
    trials: int,
    poll_s: float,
    zk_version: str,
    notes: list[str],
    bench_run: BenchRun,
) -> dict[str, Any]:
    small, large = results[0], results[-1]
    print(
        f"failover and memory by number of active topologies ({bench_run.mode}): {REPLICAS} "
        f"`nimbus serve` replicas, standalone ZooKeeper {zk_version} on loopback, session timeout "
        f"{SESSION_TIMEOUT_S:g} s, sync interval {SYNC_INTERVAL_S:g} s; every topology ACTIVE, "
        "sharing one package already in both code dirs; no supervisors"
    )
    print(
        f"{trials} graceful failovers per N, interleaved across N: SIGTERM the leader, "
        "then poll the other replica "
        f"every {poll_s * 1000:g} ms: 'leader answers' = its GetLeaderAddress names "
        "itself with a higher epoch; 'first write' = Deactivate/ActivateTopology through it "
        "returned OK. Steps from the new leader's log (ms after the signal, p50): 'won "
        "lock', 'took office' (code gate after winning + take-office multi-op), 'leading' "
        "(writes accepted from here); 'leading -> write': from there to the write's OK."
    )
    print()
    rows: list[list[object]] = []
    for s in results:
        rows.append(
            [
                f"{s.n:,}",
                f"{s.p50_ms('answered_s'):.1f}",
                f"{s.min_ms('wrote_s'):.1f}",
                f"{s.p50_ms('wrote_s'):.1f}",
                f"{s.max_ms('wrote_s'):.1f}",
                _cell(s.step_p50_ms("won the lock")),
                _cell(s.step_p50_ms("took office")),
                _cell(s.step_p50_ms("leading")),
                _cell(percentile(s.leading_to_write_ms(), 50) if s.leading_to_write_ms() else None),
            ]
        )
    print_table(
        ["topologies", "leader answers p50 ms", "first write min ms", "first write p50 ms",
         "first write max ms",
         "won lock", "took office", "leading", "leading -> write"],
        rows,
    )  # fmt: skip
    print()
    mrows: list[list[object]] = []
    for s in results:
        mrows.append(
            [
                f"{s.n:,}",
                _cell(s.leader_rss_mib),
                _cell(s.follower_rss_mib),
                _cell(s.leader_rss_after_mib),
                _cell(None if s.leader_idle_cpu is None else 100 * s.leader_idle_cpu, ".0f"),
                _cell(None if s.follower_idle_cpu is None else 100 * s.follower_idle_cpu, ".0f"),
                _pct(s.leader_steady_cpu),
                _pct(s.follower_steady_cpu),
                f"{s.seed_s:.2f}",
                f"{s.first_ready_s:.2f}",
                f"{percentile([t.restart_ready_s for t in s.trials], 50):.2f}",
            ]
        )
    print_table(
        ["topologies", "leader RSS MiB", "follower RSS MiB", "leader RSS at end MiB",
         "leader idle CPU %", "follower idle CPU %", "leader steady CPU %",
         "follower steady CPU %", "seed s", "both ready s",
         "restart ready p50 s"],
        mrows,
    )  # fmt: skip
    print(
        "RSS: VmRSS once ready (record cache loaded, both queued) plus "
        f"{SETTLE_S:g} s; 'at end': the leader after all the failovers. Idle CPU: percent of "
        f"one core over those {SETTLE_S:g} s (no calls, no changes); 'steady': the same over "
        f"{STEADY_WINDOW_S:g} s from {STEADY_AFTER_S:g} s after ready. 'ready': the replica "
        "lists both, they agree on the leader, and it logged 'queued for leadership'."
    )
    ratio = large.p50_ms("wrote_s") / small.p50_ms("wrote_s")
    answered_ratio = large.p50_ms("answered_s") / small.p50_ms("answered_s")
    verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
    print()
    print(
        f"first write p50, {large.n:,} / {small.n:,} topologies = {ratio:.2f}x: {verdict} the "
        f"target <= {TARGET_RATIO}x (leader answers: {answered_ratio:.2f}x)"
    )
    for note in notes:
        print(f"note: {note}")
    footer = bench_run.footer()

    result: dict[str, Any] = {
        "benchmark": "scale",
        "topologies": [s.n for s in results],
        "trials": trials,
        "poll_interval_ms": poll_s * 1000,
        "replicas": REPLICAS,
        "session_timeout_s": SESSION_TIMEOUT_S,
        "zookeeper_version": zk_version,
        "failover_10_ms": round(small.p50_ms("wrote_s"), 2),
        "failover_10000_ms": round(large.p50_ms("wrote_s"), 2),
        "failover_ratio": round(ratio, 3),
        "target_failover_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        "leader_elected_10_ms": round(small.p50_ms("answered_s"), 2),
        "leader_elected_10000_ms": round(large.p50_ms("answered_s"), 2),
        "leader_elected_ratio": round(answered_ratio, 3),
        "notes": notes,
        **footer,
    }
    for s in results:
        result[f"replica_rss_mib_{s.n}"] = _r(s.leader_rss_mib, 1)
        result[f"follower_rss_mib_{s.n}"] = _r(s.follower_rss_mib, 1)
        result[f"leader_rss_at_end_mib_{s.n}"] = _r(s.leader_rss_after_mib, 1)
        result[f"leader_idle_cpu_pct_{s.n}"] = _r(
            None if s.leader_idle_cpu is None else 100 * s.leader_idle_cpu, 1
        )
        result[f"follower_idle_cpu_pct_{s.n}"] = _r(
            None if s.follower_idle_cpu is None else 100 * s.follower_idle_cpu, 1
        )
        for role, cpu in (("leader", s.leader_steady_cpu), ("follower", s.follower_steady_cpu)):
            result[f"{role}_steady_cpu_pct_{s.n}"] = _r(None if cpu is None else 100 * cpu, 2)
        result[f"by_n_{s.n}"] = {
            "root": s.root,
            "seed_s": round(s.seed_s, 3),
            "first_ready_s": round(s.first_ready_s, 3),
            "failover_ms": [round(t.wrote_s * 1000, 2) for t in s.trials],
            "leader_elected_ms": [round(t.answered_s * 1000, 2) for t in s.trials],
            "failover_max_ms": round(s.max_ms("wrote_s"), 2),
            "write_attempts": [t.write_attempts for t in s.trials],
            "steps_ms": [{k: round(v * 1000, 1) for k, v in t.steps.items()} for t in s.trials],
            "leading_to_write_ms": [round(ms, 1) for ms in s.leading_to_write_ms()],
            "restart_ready_s": [round(t.restart_ready_s, 3) for t in s.trials],
            "epochs": [[t.old_epoch, t.new_epoch] for t in s.trials],
        }
    return result
