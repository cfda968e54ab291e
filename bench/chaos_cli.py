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
  ``accept-close-proxy`` (see ``tests/chaos/kernel_faults.py``); the first and the last
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
Markdown table, to ``bench/results/chaos-cli.{json,md}``.
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

from _common import REPO, machine_facts, percentile, print_table

from devtools.netns import available
from leader.settings import DEFAULT_BEAT_INTERVAL
from tests.chaos import slow_disk
from tests.chaos.cli_workload import CliCall, CliWorkload, Op
from tests.chaos.kernel_cluster import ROOT, KernelCluster
from tests.chaos.kernel_ensemble import (
    LeadershipPolls,
    Poll,
    double_claims,
    leaderless,
    longest_leaderless,
)
from tests.chaos.kernel_faults import (
    EXTRA_FAULTS,
    FAULTS,
    SLOW_DISK_ROWS,
    SyncedKernelCluster,
    Trial,
    known,
    lost_or_duplicated,
    measure,
    quiet_gaps,
    run_trial,
)
from tests.chaos.probes import BenchSupervisor
from tests.chaos.txnlog import read_txns, s1_txnlog
from tests.replica_fixtures import package

SESSION_TIMEOUT = 4.0
POLL_INTERVAL = 0.05
#: A claim back within this after a pause came with the first beat after it (H plus two
#: poll periods: the poller's own resolution).
FIRST_BEAT_S = DEFAULT_BEAT_INTERVAL + 2 * POLL_INTERVAL


def _p(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 2) if values else None


def summarize(trials: list[Trial]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for fault in dict.fromkeys(t.fault for t in trials):
        mine = [t for t in trials if t.fault == fault]
        failover = [t.failover_s for t in mine if t.failover_s is not None]
        resumed = [t.resumed_s for t in mine if t.resumed_s is not None]
        unavailable = [t.unavailability_s for t in mine if t.unavailability_s is not None]
        row = {
            "trials": len(mine),
            "failover_p50_s": _p(failover, 50),
            "failover_p99_s": _p(failover, 99),
            "resumed_p50_s": _p(resumed, 50),
            "resumed_p99_s": _p(resumed, 99),
            "unavailability_p50_s": _p(unavailable, 50),
            "unavailability_p99_s": _p(unavailable, 99),
            "failed_calls": sum(len(t.failed) for t in mine),
            "new_leader": sum(1 for t in mine if t.epoch_after != t.epoch_before),
            "failovers": sum(t.failovers for t in mine),
            "longest_no_claim_s": max(t.details["polls"]["longest_no_claim_s"] for t in mine),
        }
        if fault in EXTRA_FAULTS or slow_disk.parse(fault) is not None:
            row.update(issue41_row(mine))
        # Beyond the server: the longest gap over the new leader's take-office (or, when
        # the leader stayed, over its first write after the fault).
        server = row["failover_p99_s"] if failover else row["resumed_p99_s"]
        if server is not None and row["unavailability_p99_s"] is not None:
            row["excess_p99_s"] = round(row["unavailability_p99_s"] - server, 2)
        rows[fault] = row
    return rows


def trial_figures(
    t: Trial, rounds: list[Poll], wall_minus_mono: float, calls: list[CliCall]
) -> None:
    """What the polls saw of trial ``t``, into ``t.details["polls"]`` (and, per kind of
    fault, the claim back after each pause, the time to a new leader, the submits)."""

    def mono(wall: float) -> float:
        return wall - wall_minus_mono

    d = t.details
    spec = slow_disk.parse(t.fault)
    begin = mono(d.get("stall_start", t.start))
    end = mono(d.get("stall_end", t.healed))
    until = mono(max(t.over, t.healed, d.get("stall_end", 0.0))) + 1.0
    d["polls"] = slow_disk.stall_figures(
        rounds, begin, end, until, spec.delay if spec is not None else 0.5
    )
    if "cycles" in d:  # resets-pause: the claim back after each pause
        back = [
            slow_disk.first_claim_after(rounds, mono(c["resumed"]), replica=c["victim"])
            for c in d["cycles"]
        ]
        d["reclaim_s"] = back
        d["reclaimed_within_first_beat"] = sum(
            1 for b in back if b is not None and b <= FIRST_BEAT_S
        )
    if "leader_fault_at" in d:  # slow disk + a fault on the leader
        d["new_leader_s"] = slow_disk.first_claim_after(
            rounds, mono(d["leader_fault_at"]), above_epoch=d["victim_epoch"]
        )
    if spec is not None:
        stall = [c for c in calls if c.op is Op.SUBMIT and begin <= mono(c.start) <= end]
        d["workload_submits_in_stall"] = {
            "started": len(stall),
            "acknowledged": sum(1 for c in stall if c.ok),
        }


#: Wall-clock times a fault records: shown as seconds from the trial's start.
WALL_TIMES = ("stall_start", "stall_end", "leader_fault_at", "leader_fault_undone")


def details_json(t: Trial) -> dict[str, Any]:
    """A trial's details for the report, wall-clock times as offsets from its start."""
    shown = {k: v for k, v in t.details.items() if k not in WALL_TIMES and k != "cycles"}
    for key in WALL_TIMES:
        if key in t.details:
            shown[f"{key}_at_s"] = round(t.details[key] - t.start, 2)
    if "cycles" in t.details:
        shown["cycles"] = [
            {
                **c,
                "stopped": round(c["stopped"] - t.start, 2),
                "resumed": round(c["resumed"] - t.start, 2),
            }
            for c in t.details["cycles"]
        ]
    return shown


def issue41_row(mine: list[Trial]) -> dict[str, Any]:
    """The figures of a slow-disk or must-not-depose row, over its trials."""
    polls = [t.details["polls"] for t in mine]
    fractions = [
        p["no_claim_fraction_during"] for p in polls if p["no_claim_fraction_during"] is not None
    ]
    row: dict[str, Any] = {
        "no_claim_fraction_during_mean": round(sum(fractions) / len(fractions), 3)
        if fractions
        else None,
        "no_claim_fraction_during_max": max(fractions, default=None),
        "longest_at_start_s": max(p["longest_at_start_s"] for p in polls),
        "longest_after_start_s": max(p["longest_after_start_s"] for p in polls),
        "longest_is_at_start": sum(1 for p in polls if p["longest_is_at_start"]),
        "double_claims": sum(len(p["double_claims"]) for p in polls),
        "errors": [t.error for t in mine if t.error],
    }
    probes = [p for t in mine for p in t.details.get("probe_submits", [])]
    if probes:
        row["probe_submits"] = len(probes)
        row["probe_acknowledged"] = sum(1 for p in probes if p["ok"])
        row["probe_acknowledged_during_fault"] = sum(
            1 for p in probes if p["answered_during_fault"]
        )
        if any("assigned" in p for p in probes):
            row["probe_scheduled"] = sum(1 for p in probes if p.get("assigned"))
    back = [b for t in mine for b in t.details.get("reclaim_s", [])]
    if back:
        row["pauses"] = len(back)
        row["reclaimed_within_first_beat"] = sum(
            1 for b in back if b is not None and b <= FIRST_BEAT_S
        )
        row["reclaim_max_s"] = max((b for b in back if b is not None), default=None)
        row["reclaim_missing"] = sum(1 for b in back if b is None)
    new_leader = [
        t.details["new_leader_s"] for t in mine if t.details.get("new_leader_s") is not None
    ]
    if any("leader_fault_at" in t.details for t in mine):
        row["new_leader_p50_s"] = _p(new_leader, 50)
        row["new_leader_max_s"] = max(new_leader, default=None)
        took = [
            t.details["take_office_s"] for t in mine if t.details.get("take_office_s") is not None
        ]
        row["take_office_p50_s"] = _p(took, 50)
    if slow_disk.parse(mine[0].fault) is not None:
        row["write_under_stall_min_s"] = min(
            (
                t.details[k]
                for t in mine
                for k in ("write_at_start_s", "write_at_end_s")
                if k in t.details
            ),
            default=None,
        )
        row["write_after_stall_max_s"] = max(t.details.get("write_after_s", 0.0) for t in mine)
        row["syncs_delayed"] = sum(t.details.get("syncs_delayed", 0) for t in mine)
        row["zk_fsync_warnings"] = sum(
            t.details.get("zk_fsync_warnings", {}).get("count", 0) for t in mine
        )
        submits = [t.details.get("workload_submits_in_stall", {}) for t in mine]
        row["workload_submits_in_stall"] = sum(s.get("started", 0) for s in submits)
        row["workload_submits_in_stall_acknowledged"] = sum(
            s.get("acknowledged", 0) for s in submits
        )
    return row


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
    why_not = available()
    if why_not is not None:
        print(f"kernel faults cannot be made here: {why_not}", file=sys.stderr)
        return 2
    trials_per_fault = 1 if args.quick else args.trials
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if not known(f)]
    if unknown:
        names = ", ".join([*FAULTS, *EXTRA_FAULTS, *SLOW_DISK_ROWS])
        parser.error(f"unknown faults {unknown}; known: {names} (any zk-slow-disk@D[+FAULT])")
    slow = any(slow_disk.parse(f) is not None for f in faults)
    if slow and slow_disk.available() is not None:
        print(f"slow-disk faults cannot be made here: {slow_disk.available()}", file=sys.stderr)
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
        "quiet_gap_p50_s": _p(quiet, 50),
        "quiet_gap_p99_s": _p(quiet, 99),
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


ISSUE41_NOTE = (
    "\nissue 41 rows: no-claim during: the fraction of poll rounds during the fault with no "
    "replica claiming (mean / max over trials); longest at start / after: the longest "
    "no-claim stretch that began within max(1 s, 2D) of the stall's start (1 s for the other "
    "rows), and the longest that began later; at start: trials whose longest stretch is the "
    "one at the start; probe: submits of a fresh package sent during the fault, acknowledged "
    "(during the fault) / scheduled; new leader: from the fault on the leader to the first "
    "poll with a newer term claimed; reclaim: the paused leader's first claim after each "
    "SIGCONT (within the first beat: <= H + two poll periods); write under stall: the "
    "shortest timed admin write during the stall (must be >= D)\n"
)


def issue41_table(rows: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = [
        "fault", "no-claim during mean/max", "longest at start / after s", "at start",
        "probe acked (during) / scheduled", "new leader p50/max s", "reclaim first beat / max s",
        "write under stall min s", "workload submits in stall acked",
    ]  # fmt: skip
    table = []
    for fault, r in rows.items():
        if "no_claim_fraction_during_mean" not in r:
            continue
        probe = "-"
        if "probe_submits" in r:
            probe = (
                f"{r['probe_acknowledged']}/{r['probe_submits']} "
                f"({r['probe_acknowledged_during_fault']}) / {r.get('probe_scheduled', '-')}"
            )
        new_leader = "-"
        if "new_leader_p50_s" in r:
            new_leader = f"{r['new_leader_p50_s']} / {r['new_leader_max_s']}"
        reclaim = "-"
        if "pauses" in r:
            reclaim = f"{r['reclaimed_within_first_beat']}/{r['pauses']} / {r['reclaim_max_s']}"
        stall_submits = "-"
        if "workload_submits_in_stall" in r:
            stall_submits = (
                f"{r['workload_submits_in_stall_acknowledged']}/{r['workload_submits_in_stall']}"
            )
        table.append(
            [
                fault,
                f"{r['no_claim_fraction_during_mean']} / {r['no_claim_fraction_during_max']}",
                f"{r['longest_at_start_s']} / {r['longest_after_start_s']}",
                f"{r['longest_is_at_start']}/{r['trials']}",
                probe,
                new_leader,
                reclaim,
                str(r.get("write_under_stall_min_s", "-")),
                stall_submits,
            ]
        )
    return header, table


if __name__ == "__main__":
    sys.exit(main())
