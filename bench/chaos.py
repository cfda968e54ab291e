"""The chaos soak: every fault of the issue, many trials each, and the report.

For each fault a fresh 3-replica cluster runs on one 3-node ZooKeeper ensemble (started
here) under the client workload of ``tests/chaos``; the nemesis injects the fault
``--trials`` times, one at a time, and the checkers S1-S4 judge the history and the final
state. Results are written after every fault, so an interrupted soak keeps what it
measured:

* ``bench/results/chaos.json``: per fault ``trials``, ``violations`` (S1-S4 counts),
  ``unavailable_s`` (p50, p99, max of the gap from the last acknowledged write before the
  fault to the first after it), ``after_heal_s``, ``leader_changes``, the target and how
  many trials met it; plus ``session_timeout_s`` and the machine;
* ``bench/results/chaos.md``: the same as a table;
* ``bench/results/chaos-timeline.png``: leadership per replica, faults and client errors.

Run from the repo root: ``python bench/chaos.py [--trials 20] [--faults a,b] [--quick]``
(``--quick``: 2 trials of each fault). ``disk-full-follower`` mounts a small tmpfs per
replica and needs root; without it that fault is skipped and says so.

A slow ZooKeeper disk (issue 41), selected by name only: ``--faults zk-slow-disk@0.9`` (any
``zk-slow-disk@D``; the rows ``@0.45``, ``@0.9``, ``@2``): every fsync of every server
delayed by D seconds for 30 s (strace's fault injection on the JVMs; needs root and
``strace``); the run's ensemble then syncs its log (``forceSync=yes``). Its line adds
``slow_disk``: failovers (epoch changes), the longest stretch with no replica claiming
(every replica polled every 50 ms), the fraction of poll rounds with none claiming during
the stall, whether the longest stretch is the one at the stall's start (and the longest
after it), and the workload's submits made during the stall: acknowledged and scheduled
(a supervisor without workers offers slots). A write that takes less than D during the
stall fails the trial: the stall did not work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _common import REPO, chosen_faults, machine_facts, spread

from devtools.zkserver import ZooKeeperCluster
from tests.chaos import slow_disk
from tests.chaos.availability import TARGETS, met, window
from tests.chaos.history import Call, Fault, History
from tests.chaos.nemesis import FAULTS
from tests.chaos.nemesis_slow_disk import SLOW_DISK_ROWS, fault_kind, slow_disk_figures
from tests.chaos.runner import RunResult, run_fault

RESULTS = REPO / "bench" / "results"


def figures(result: RunResult) -> dict[str, Any]:
    """One fault's line of the report."""
    kind = FAULTS[result.fault]
    T = result.session_timeout
    windows = [window(result.history, f) for f in result.faults]
    gaps = [w.gap for w in windows if w.gap is not None]
    heals = [w.after_heal for w in windows if w.after_heal is not None]
    target = kind.target_at(T)
    verdicts = [met(target, w, T) for w in windows]
    calls = result.history.calls
    failovers = [f.failover_s for f in result.faults if f.failover_s is not None]
    line = {
        "trials": len(result.faults),
        "recovered": sum(f.recovered for f in result.faults),
        "violations": {k: len(v) for k, v in result.violations.items()},
        # Trials in which a ZooKeeper server's digest mismatches rose: ZooKeeper itself
        # diverged (ZOOKEEPER-4837); their violations still count above.
        "zk_diverged": sum(f.zk_diverged is True for f in result.faults),
        "violation_examples": {k: v[:5] for k, v in result.violations.items() if v},
        "unavailable_s": spread(gaps),
        "unavailable_T": spread([g / T for g in gaps]),
        "failover_s": spread(failovers),
        "failed_calls": sum(c.outcome != "ok" for c in calls),
        "after_heal_s": spread(heals),
        "leader_changes": sum(w.leader_changed for w in windows),
        "target": f"{TARGETS[target][0]} {TARGETS[target][1]}",
        "target_met": sum(v is True for v in verdicts),
        "target_applies": sum(v is not None for v in verdicts),
        "calls": {
            "ok": sum(c.outcome == "ok" for c in calls),
            "fail": sum(c.outcome == "fail" for c in calls),
            "unknown": sum(c.outcome == "unknown" for c in calls),
        },
    }
    stalls = [(f, slow_disk_figures(f)) for f in result.faults]
    if any(figs is not None for _, figs in stalls):
        line["slow_disk"] = slow_disk_line(result, [(f, s) for f, s in stalls if s is not None])
    return line


def slow_disk_line(result: RunResult, stalls: list[tuple[Fault, dict[str, Any]]]) -> dict[str, Any]:
    """A slow-disk row's own figures, over its trials, and each trial's."""
    polls = [s["polls"] for _, s in stalls if "polls" in s]
    fractions = [p["no_claim_fraction_during"] for p in polls]
    fractions = [x for x in fractions if x is not None]
    submits = [s["submits_in_stall"] for _, s in stalls if "submits_in_stall" in s]
    writes = [s[k] for _, s in stalls for k in ("write_at_start_s", "write_at_end_s") if k in s]
    return {
        "failovers": sum(max(0, f.epoch_after - f.epoch_before) for f, _ in stalls),
        "longest_no_claim_s": max((p["longest_no_claim_s"] for p in polls), default=None),
        "longest_at_start_s": max((p["longest_at_start_s"] for p in polls), default=None),
        "longest_after_start_s": max((p["longest_after_start_s"] for p in polls), default=None),
        "longest_is_at_start": sum(1 for p in polls if p["longest_is_at_start"]),
        "no_claim_fraction_during_mean": (
            round(sum(fractions) / len(fractions), 3) if fractions else None
        ),
        "no_claim_fraction_during_max": max(fractions, default=None),
        "double_claims": sum(len(p["double_claims"]) for p in polls),
        "failed_calls": sum(c.outcome != "ok" for c in result.history.calls),
        "submits_in_stall": sum(s["started"] for s in submits),
        "submits_in_stall_acknowledged": sum(s["acknowledged"] for s in submits),
        "submits_in_stall_scheduled": sum(s["scheduled"] for s in submits),
        "submits_in_stall_unscheduled_live": sum(s.get("unscheduled_live", 0) for s in submits),
        "write_under_stall_min_s": min(writes, default=None),
        "syncs_delayed": sum(s.get("syncs_delayed", 0) for _, s in stalls),
        "nemesis_errors": [f.note for f, _ in stalls if f.note],
        "trials": [{"epochs": [f.epoch_before, f.epoch_after], **s} for f, s in stalls],
    }


def write_markdown(report: dict[str, Any], path: Path) -> None:
    T = report["session_timeout_s"]
    lines = [
        f"# Chaos soak (session timeout T = {T:g} s)",
        "",
        f"{report['machine']['cores']} cores, {report['machine']['cpu_model']}; "
        f"{report['started']} to {report['finished']}. Unavailable: from the last "
        "acknowledged write before the fault to the first after it; after heal: from the "
        "fault's undoing to the first acknowledged write; failover: from the fault to the new "
        "leader's take-office write (ZooKeeper's ctime of /epochs/<n>); failed calls: calls "
        "that ended in an error with the client's default deadlines. Violations S1/S2/S3/S4.",
        "",
        "| fault | trials | recovered | S1/S2/S3/S4 | zk diverged "
        "| unavailable p50 / p99 / max (s) "
        "| in T (p99) | failover p50 / max (s) | failed calls | after heal p50 / max (s) "
        "| leader changes | target | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in report["faults"].items():
        if "skipped" in f or "error" in f:
            why = f.get("skipped") or f"harness error: {f['error'][:120]}"
            lines.append(f"| {name} | 0 | - | - | - | - | - | - | - | - | - | {why} | - |")
            continue
        v, u, h = f["violations"], f["unavailable_s"], f["after_heal_s"]
        fo = f.get("failover_s") or {"p50": None, "max": None}
        met_text = f"{f['target_met']}/{f['target_applies']}" if f["target_applies"] else "n/a"
        lines.append(
            f"| {name} | {f['trials']} | {f['recovered']} | "
            f"{v['S1']}/{v['S2']}/{v['S3']}/{v['S4']} | {f.get('zk_diverged', '-')} | "
            f"{u['p50']} / {u['p99']} / {u['max']} | "
            f"{f['unavailable_T']['p99']} | {fo['p50']} / {fo['max']} | {f['failed_calls']} | "
            f"{h['p50']} / {h['max']} | {f['leader_changes']} | "
            f"{f['target']} | {met_text} |"
        )
    stalls = {n: f["slow_disk"] for n, f in report["faults"].items() if "slow_disk" in f}
    if stalls:
        lines += [
            "",
            "Slow ZooKeeper disk (every fsync of every server delayed by D for 30 s): failovers "
            "(new terms); the longest stretch with no replica claiming (every replica polled "
            "every 50 ms), the longest that began within max(1 s, 2D) of the stall's start and "
            "the longest after; trials whose longest is the one at the start; the fraction of "
            "poll rounds with none claiming during the stall; the workload's submits made "
            "during the stall, acknowledged and scheduled (in brackets: acknowledged, not "
            "killed by the workload, and never scheduled); the shortest timed write during "
            "the stall (>= D: the stall worked).",
            "",
            "| fault | failovers | longest no-claim (s) | at start / after (s) | at start "
            "| no-claim rounds mean / max | failed calls | stall submits acked / scheduled "
            "| write under stall min (s) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, sd in stalls.items():
            lines.append(
                f"| {name} | {sd['failovers']} | {sd['longest_no_claim_s']} | "
                f"{sd['longest_at_start_s']} / {sd['longest_after_start_s']} | "
                f"{sd['longest_is_at_start']}/{len(sd['trials'])} | "
                f"{sd['no_claim_fraction_during_mean']} / {sd['no_claim_fraction_during_max']} | "
                f"{sd['failed_calls']} | {sd['submits_in_stall_acknowledged']}/"
                f"{sd['submits_in_stall']} / {sd['submits_in_stall_scheduled']} "
                f"({sd['submits_in_stall_unscheduled_live']}) | "
                f"{sd['write_under_stall_min_s']} |"
            )
    notes = report.get("notes", [])
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    path.write_text("\n".join(lines) + "\n")


def plot(results: list[RunResult], path: Path) -> None:
    """Leadership per replica (a dot per sample while it says it leads, coloured by epoch),
    fault windows shaded, acknowledged writes and client errors on the bottom row.

    Skipped, with a line on stderr, where matplotlib is not installed (the ``chaos`` extra).
    """
    try:
        import matplotlib
    except ImportError:
        print(f"no timeline ({path.name}): pip install -e '.[chaos]'", file=sys.stderr)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(14, 1.9 * len(results)), squeeze=False)
    for ax, result in zip(axes[:, 0], results, strict=True):
        h = result.history
        for f in result.faults:
            ax.axvspan(f.start, f.healed if f.healed > f.start else f.start + 0.05,
                       color="orange", alpha=0.35, lw=0)  # fmt: skip
            ax.axvline(f.start, color="darkorange", lw=0.6)
        if h.leadership:
            _, ts, rs, es = zip(*h.leadership, strict=True)
            ax.scatter(ts, rs, c=es, cmap="tab10", s=4, marker="s")
        ok = [c.end for c in h.calls if c.outcome == "ok" and c.kind != "leader"]
        bad = [c.end for c in h.calls if c.outcome != "ok"]
        ax.scatter(ok, [-1] * len(ok), s=3, color="green", marker="|")
        ax.scatter(bad, [-1.4] * len(bad), s=8, color="red", marker="x")
        ax.set_yticks([-1.2, 0, 1, 2], ["calls", "r0", "r1", "r2"])
        ax.set_ylim(-1.8, 2.6)
        ax.set_title(result.fault, fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
    axes[-1, 0].set_xlabel("seconds since the cluster started")
    fig.suptitle(
        "Leadership (dots, colour = epoch), faults (orange), acknowledged writes (green) and "
        "failed or unknown calls (red)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.25 / len(results)))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def load_result(path: Path) -> RunResult:
    """A fault's run as saved with ``--histories``."""
    saved = json.loads(path.read_text())
    history = History(t0=0.0)
    history.calls = [Call(**c) for c in saved["history"]["calls"]]
    history.faults = [Fault(**f) for f in saved["history"]["faults"]]
    history.leadership = [
        (s[0], s[0], s[1], s[2]) if len(s) == 3 else (s[0], s[1], s[2], s[3])
        for s in saved["history"]["leadership"]
    ]
    return RunResult(
        saved["fault"], saved["session_timeout"], history, history.faults, saved["violations"]
    )


def _interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so replicas and ZooKeeper are stopped on the way out."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def main() -> int:
    _interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"comma-separated (default: every fault); also {', '.join(SLOW_DISK_ROWS)} "
        "(any zk-slow-disk@D)",
    )
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true", help="2 trials of each fault")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--name", default="chaos", help="report file names: NAME.json, NAME.md (chaos-T20 at T=20)"
    )
    parser.add_argument("--note", action="append", default=[], help="a line for the report")
    parser.add_argument(
        "--histories", type=Path, default=None, help="also save each fault's history here"
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        help="run the replicas here and keep it (logs, code dirs, ZooKeeper data) afterwards",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other faults of an earlier chaos.json (and plot them from --histories)",
    )
    args = parser.parse_args()
    trials = 2 if args.quick else args.trials
    names = chosen_faults(
        parser,
        args.faults,
        lambda name: fault_kind(name) is not None,
        f"{', '.join(FAULTS)} (any zk-slow-disk@D)",
    )
    # A slow disk slows only a ZooKeeper that syncs its log: then it syncs for the whole run.
    slow = any(slow_disk.parse(n) is not None for n in names)
    if slow and slow_disk.available() is not None:
        parser.error(f"slow-disk faults cannot be made here: {slow_disk.available()}")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "session_timeout_s": args.session_timeout,
        "trials_per_fault": trials,
        "machine": asdict(machine_facts()),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "finished": "",
        "faults": {},
        "notes": list(args.note)
        + (
            ["ZooKeeper synced its log (forceSync=yes) in this run: slow-disk rows"] if slow else []
        ),
    }
    results: list[RunResult] = []
    report_json = args.out / f"{args.name}.json"
    if args.merge and report_json.exists():
        earlier = json.loads(report_json.read_text())
        report["started"] = earlier["started"]
        report["notes"] = earlier.get("notes", []) + report["notes"]
        for name, line in earlier["faults"].items():
            if name in names:
                continue
            report["faults"][name] = line
            saved = (args.histories or Path("/nonexistent")) / f"{name.replace('/', '_')}.json"
            if saved.exists():
                results.append(load_result(saved))
    with (
        # With --keep-logs the servers' data (transaction logs) is kept too, for forensics.
        ZooKeeperCluster(
            size=3,
            base_dir=args.keep_logs / "zookeeper" if args.keep_logs else None,
            force_sync=slow,
            extra_config=slow_disk.ensemble_config(args.session_timeout) if slow else (),
        ) as zk,
        contextlib.nullcontext(str(args.keep_logs))
        if args.keep_logs is not None
        else tempfile.TemporaryDirectory(prefix="chaos-") as work,
    ):
        Path(work).mkdir(parents=True, exist_ok=True)
        for name in names:
            if FAULTS[name].needs_root and os.geteuid() != 0:
                report["faults"][name] = {"skipped": "needs root (tmpfs code dirs)"}
                continue
            began = time.monotonic()
            print(f"{name}: {trials} trials ...", flush=True)
            try:
                result = run_fault(
                    zk, Path(work) / name.replace("/", "_"), name, trials,
                    session_timeout=args.session_timeout,
                )  # fmt: skip
            except Exception as e:  # the harness failed (e.g. a JVM crashed): say so, go on
                report["faults"][name] = {"error": repr(e)[:500]}
                print(f"{name}: harness error {e!r}", flush=True)
                zk.heal()
                continue
            results.append(result)
            if args.histories is not None:
                args.histories.mkdir(parents=True, exist_ok=True)
                saved = {
                    "fault": name,
                    "session_timeout": result.session_timeout,
                    "violations": result.violations,
                    "history": result.history.to_json(),
                    "logs": result.logs,
                }
                target = args.histories / f"{name.replace('/', '_')}.json"
                target.write_text(json.dumps(saved))
            line = figures(result)
            line["wall_s"] = round(time.monotonic() - began, 1)
            report["faults"][name] = line
            report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            print(json.dumps({name: line}), flush=True)
            report_json.write_text(json.dumps(report, indent=2) + "\n")
            write_markdown(report, args.out / f"{args.name}.md")
            plot(results, args.out / f"{args.name}-timeline.png")
            zk.heal()
    print(json.dumps({n: f.get("violations", f) for n, f in report["faults"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
