"""What a user of the ``nimbus`` CLI sees while the kernel partitions, freezes and kills the
leader: client-perceived unavailability next to the server-side failover, and failed calls.

Starts its own ZooKeeper and three ``nimbus serve`` replicas, each in its own network
namespace (``devtools.netns``; needs root and iptables), runs two workers of CLI processes
with default settings (submit, list, kill, over and over; every replica a seed), and
injects each fault of the matrix on the leader ``--trials`` times:

* **failover**: the fault to the first fenced write of the leader in office after it
  (ZooKeeper's ctime of the first ``/requests`` record of that epoch);
* **unavailability**: the last acknowledged CLI change before the fault to the first after;
* **failed**: CLI calls that ended in an error (the default deadline, 30 s, outlasts every
  failover here); **lost/dup**: acknowledged changes missing or doubled in ZooKeeper.

Every row also gives **failovers** (new terms, counted by epoch) and the **longest stretch
with no replica claiming** leadership in the trial (every replica polled every 50 ms).

Beside the default matrix (``FAULTS``), selectable with ``--faults`` (issue 41):

* faults that must not depose a healthy leader: ``port-refuse-3T``, ``resets-pause``,
  ``accept-close-proxy`` (see ``tests/chaos/kernel_faults_extra.py``); the first and the last
  also send a submit of a fresh package (one the replicas must copy) during the fault;
* a slow ZooKeeper disk, ``zk-slow-disk@D``: every fsync of the server delayed by D seconds
  for 30 s (strace's fault injection on the JVM; needs ``strace``), any D; with
  ``+FAULT`` (``zk-slow-disk@0.9+sigkill``, ``+sigstop-3T``) that fault hits the leader
  5 s into the stall and the row gives the time to a new leader. A write timed from an
  admin client must take at least D during the stall, or the trial fails loudly (exit 1).
  Selecting one runs ZooKeeper with ``forceSync=yes`` (for the whole run) and a supervisor
  without workers, so that a topology submitted during the stall can be seen scheduled.

Run from the repo root as root: ``python bench/chaos_cli.py [--quick] [--trials N]``. The
last line of stdout is one JSON object with the figures; ``--out`` also writes them, with a
Markdown table, to ``bench/results/chaos-cli.{json,md}``. The rows' figures and issue 41's
table are made in ``bench/_chaos_cli_rows.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _chaos_cli_rows import (
    ISSUE41_NOTE,
    details_json,
    issue41_table,
    rounded_percentile,
    summarize,
    trial_figures,
)
from _common import REPO, cannot_make, chosen_faults, machine_facts, print_table

from devtools.netns import available
from tests.chaos import slow_disk
from tests.chaos.cli_workload import CliWorkload
from tests.chaos.kernel_cluster import ROOT, KernelCluster
from tests.chaos.kernel_ensemble import (
    LeadershipPolls,
    Poll,
    double_claims,
    leaderless,
    longest_leaderless,
)
from tests.chaos.kernel_faults import (
    FAULTS,
    known,
    lost_or_duplicated,
    measure,
    quiet_gaps,
    run_trial,
)
from tests.chaos.kernel_faults_extra import EXTRA_FAULTS, SLOW_DISK_ROWS, SyncedKernelCluster
from tests.chaos.kernel_trial import Trial
from tests.chaos.probes import BenchSupervisor
from tests.chaos.txnlog import read_txns, s1_txnlog
from tests.replica_fixtures import package

SESSION_TIMEOUT = 4.0


def epochs_backwards(rounds: list[Poll]) -> list[str]:
    """Rounds whose highest claimed epoch is below one claimed in an earlier round."""
    found, highest = [], 0
    for p in rounds:
        if p.claims and max(p.claims.values()) < highest:
            found.append(f"at {p.at:.2f}: {p.claims} after epoch {highest}")
        highest = max([highest, *p.claims.values()])
    return found


def explain_leaderless(
    rounds: list[Poll], trials: list[Trial], wall_minus_mono: float, top: int = 5
) -> list[dict[str, Any]]:
    """The longest stretches with no replica claiming, each placed: seconds from the first
    round, the trial under way (its fault, seconds since it began) or none, and how the
    replicas answered in it (letters per replica: L, F, U unavailable, T timeout, E)."""
    first = rounds[0].at if rounds else 0.0
    placed = []
    for since, to in sorted(leaderless(rounds), key=lambda s: s[0] - s[1])[:top]:
        begin, end = since + wall_minus_mono, to + wall_minus_mono
        overlaps = [t for t in trials if t.start <= end and begin <= max(t.over, t.healed)]
        if overlaps:
            during = f"{overlaps[-1].fault}, from {begin - overlaps[-1].start:+.1f} s of it"
        elif not trials or end < trials[0].start:
            during = "before the first trial"
        else:
            during = "between trials"
        said = Counter(p.answers for p in rounds if since < p.at < to)
        placed.append(
            {
                "seconds": round(to - since, 2),
                "from_s": round(since - first, 1),
                "trial": during,
                "answers": dict(said.most_common(4)),
            }
        )
    return placed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one trial per fault")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help="comma-separated (default: the matrix); also "
        + ", ".join([*EXTRA_FAULTS, *SLOW_DISK_ROWS])
        + " (any zk-slow-disk@D[+FAULT])",
    )
    parser.add_argument("--out", action="store_true", help="write bench/results/chaos-cli.*")
    parser.add_argument(
        "--session-timeout", type=float, default=SESSION_TIMEOUT, help="T of the replicas (s)"
    )
    parser.add_argument("--name", default="chaos-cli", help="results file name (with --out)")
    args = parser.parse_args(argv)
    if cannot_make("kernel faults", available()):
        return 2
    trials_per_fault = 1 if args.quick else args.trials
    names = ", ".join([*FAULTS, *EXTRA_FAULTS, *SLOW_DISK_ROWS])
    faults = chosen_faults(parser, args.faults, known, f"{names} (any zk-slow-disk@D[+FAULT])")
    slow = any(slow_disk.parse(f) is not None for f in faults)
    if slow and cannot_make("slow-disk faults", slow_disk.available()):
        return 2
    trials: list[Trial] = []
    wall_minus_mono = time.time() - time.monotonic()
    with tempfile.TemporaryDirectory(prefix="chaos-cli-") as work:
        workdir = Path(work)
        # A slow disk slows only a ZooKeeper that syncs: then it syncs for the whole run.
        make = SyncedKernelCluster if slow else KernelCluster
        cluster = make(workdir, session_timeout=args.session_timeout)
        supervisor: BenchSupervisor | None = None
        try:
            cluster.start()
            if slow:  # somewhere to schedule the topology submitted during a stall
                supervisor = BenchSupervisor(cluster.zk.connect_string, ROOT, workdir)
                supervisor.start(cluster.admin())
            path, _ = package(workdir, "bench")
            workload = CliWorkload(cluster.seeds, path, workers=2, run_id=uuid.uuid4().hex[:6])
            workload.start()
            # Every replica asked at once, every 50 ms, whether it leads (issue 28).
            polls = LeadershipPolls([r.address for r in cluster.replicas]).start()
            try:
                for n in range(trials_per_fault):
                    for fault in faults:
                        trial = run_trial(cluster, workload, fault)
                        trials.append(trial)
                        if trial.error:
                            print(f"trial {n + 1} {fault}: FAULT NOT MADE: {trial.error}",
                                  file=sys.stderr, flush=True)  # fmt: skip
                        print(f"trial {n + 1} {fault}: done", file=sys.stderr, flush=True)
            finally:
                workload.stop()
                polls.stop()
            rounds = polls.rounds()
            measure(cluster, workload, trials)
            quiet = quiet_gaps(workload, trials)
            problems = lost_or_duplicated(cluster, workload)
            s1 = s1_txnlog(read_txns(cluster.zk), ROOT)
            calls = workload.snapshot()
        finally:
            if supervisor is not None:
                supervisor.stop()
            cluster.stop()
    for t in trials:
        trial_figures(t, rounds, wall_minus_mono, calls)
    rows = summarize(trials)
    header = [
        "fault", "trials", "failover p50/p99 s", "resumed p50/p99 s", "unavail p50/p99 s",
        "excess p99", "failed", "failovers", "longest no-claim s",
    ]  # fmt: skip
    table = [
        [
            fault,
            str(r["trials"]),
            f"{r['failover_p50_s']} / {r['failover_p99_s']}",
            f"{r['resumed_p50_s']} / {r['resumed_p99_s']}",
            f"{r['unavailability_p50_s']} / {r['unavailability_p99_s']}",
            str(r.get("excess_p99_s")),
            str(r["failed_calls"]),
            str(r["failovers"]),
            str(r["longest_no_claim_s"]),
        ]
        for fault, r in rows.items()
    ]
    print_table(header, table)
    header41, table41 = issue41_table(rows)
    if table41:
        print()
        print_table(header41, table41)
    errors = [f"{t.fault}: {t.error}" for t in trials if t.error]
    figures = {
        "session_timeout_s": args.session_timeout,
        "zookeeper_force_sync": slow,
        "supervisor": slow,
        "fault_errors": errors,
        "s1_txnlog_violations": s1[:10],
        "faults": rows,
        "calls": len(calls),
        # The workload's own gaps between acknowledged changes, away from every fault.
        "quiet_gap_p50_s": rounded_percentile(quiet, 50),
        "quiet_gap_p99_s": rounded_percentile(quiet, 99),
        "quiet_gap_max_s": round(max(quiet), 2) if quiet else None,
        "trial_details": [
            {
                "fault": t.fault,
                "epochs": [t.epoch_before, t.epoch_after],
                "failover_s": t.failover_s,
                "resumed_s": t.resumed_s,
                "unavailability_s": t.unavailability_s,
                "failed": len(t.failed),
                "failovers": t.failovers,
                **({"error": t.error} if t.error else {}),
                **details_json(t),
            }
            for t in trials
        ],
        "failed_calls": sum(r["failed_calls"] for r in rows.values()),
        "poll_rounds": len(rounds),
        "double_claims": double_claims(rounds)[:10],
        "epochs_backwards": epochs_backwards(rounds)[:10],
        "longest_leaderless_s": round(longest_leaderless(rounds), 2),
        "leaderless_stretches": explain_leaderless(rounds, trials, wall_minus_mono),
        "lost_or_duplicated": problems,
        "failed_examples": [
            f"{c.op.value} {c.name}: {c.stderr[-200:]}" for t in trials for c in t.failed
        ][:10],
        "machine": asdict(machine_facts()),
    }
    if args.out:
        results = REPO / "bench" / "results"
        (results / f"{args.name}.json").write_text(json.dumps(figures, indent=2) + "\n")
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in table]
        if table41:
            lines += ["", "| " + " | ".join(header41) + " |", "|" + "---|" * len(header41)]
            lines += ["| " + " | ".join(row) + " |" for row in table41]
        (results / f"{args.name}.md").write_text(
            f"# CLI availability under kernel faults (T = {args.session_timeout:g} s)\n\n"
            + "\n".join(lines)
            + f"\n\ncalls: {len(calls)}, lost or duplicated: {problems or 'none'}, "
            f"S1 from the transaction log: {len(s1)} violation(s); the workload's own gaps "
            f"between acknowledged changes away from the faults: p50 {figures['quiet_gap_p50_s']}"
            f" / p99 {figures['quiet_gap_p99_s']} / max {figures['quiet_gap_max_s']} s; "
            f"{len(rounds)} rounds of leadership polls (every replica every 50 ms): "
            f"{len(double_claims(rounds))} with two claiming, "
            f"{len(epochs_backwards(rounds))} with a claimed epoch going backwards; the "
            f"longest stretches with no claim: {figures['leaderless_stretches']}\n"
            "\nfailover: the fault to the new leader's take-office (ZooKeeper's ctime of "
            "/epochs/<n>); resumed: to the first fenced write after the fault; unavail: the "
            "longest gap between acknowledged CLI changes across the fault; excess: unavail "
            "p99 minus failover p99 (resumed p99 where the leader stayed); failovers: new "
            "terms (epochs) in the row's trials; longest no-claim: the longest stretch with no "
            "replica claiming in a trial, from the fault to its end\n"
            + (ISSUE41_NOTE if table41 else "")
        )
    print(json.dumps(figures))
    if errors:
        print(f"FAULTS NOT MADE as they say: {errors}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
