"""bench/chaos_cli.py's rows: each trial's figures from the polls, each fault's row over its
trials (with issue 41's figures), a trial's details for the JSON, and issue 41's table.
"""

from __future__ import annotations

from typing import Any

from _common import percentile

from leader.settings import DEFAULT_BEAT_INTERVAL
from tests.chaos import slow_disk
from tests.chaos.cli_workload import CliCall, Op
from tests.chaos.kernel_ensemble import Poll
from tests.chaos.kernel_faults_extra import EXTRA_FAULTS
from tests.chaos.kernel_trial import Trial

POLL_INTERVAL = 0.05
#: A claim back within this after a pause came with the first beat after it (H plus two
#: poll periods: the poller's own resolution).
FIRST_BEAT_S = DEFAULT_BEAT_INTERVAL + 2 * POLL_INTERVAL


def rounded_percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values`` to 0.01, None for none."""
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
            "failover_p50_s": rounded_percentile(failover, 50),
            "failover_p99_s": rounded_percentile(failover, 99),
            "resumed_p50_s": rounded_percentile(resumed, 50),
            "resumed_p99_s": rounded_percentile(resumed, 99),
            "unavailability_p50_s": rounded_percentile(unavailable, 50),
            "unavailability_p99_s": rounded_percentile(unavailable, 99),
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
        row["new_leader_p50_s"] = rounded_percentile(new_leader, 50)
        row["new_leader_max_s"] = max(new_leader, default=None)
        took = [
            t.details["take_office_s"] for t in mine if t.details.get("take_office_s") is not None
        ]
        row["take_office_p50_s"] = rounded_percentile(took, 50)
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
