"""bench/peers.py's pure parts: the run order, the "I lead" lines, the slow-disk column's
poll rounds, the table and the JSON (tests/test_peers_bench.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from _common import format_table, percentile

_TOOK_OFFICE = re.compile(r": took office, epoch \d+")

#: The column whose figure is a fraction of poll rounds, not seconds to a new leader.
SLOW_DISK = "slow-disk"


# -- pure parts (tests/test_peers_bench.py) ---------------------------------------------


def schedule(
    systems: Sequence[str],
    faults: Sequence[str],
    trials: int,
    rounds: Mapping[str, int] | None = None,
) -> list[tuple[int, str, str]]:
    """``(round, fault, system)`` in run order: round i of every fault and system before
    round i + 1, the systems' order rotated by one each round (no system always first).
    ``rounds``: a fault's own number of rounds where it is not ``trials``."""
    per_fault = {f: (rounds or {}).get(f, trials) for f in faults}
    order: list[tuple[int, str, str]] = []
    for i in range(max(per_fault.values(), default=0)):
        shift = i % len(systems) if systems else 0
        rotated = [*systems[shift:], *systems[:shift]]
        for fault in faults:
            if i >= per_fault[fault]:
                continue
            for system in rotated:
                order.append((i, fault, system))
    return order


def parse_lead(system: str, line: str, seen_s: float, lock_name: str = "") -> float | None:
    """When ``line`` (one line of a candidate's output) says it leads: the time it gives
    (Unix seconds), else ``seen_s`` for a system whose line has none (etcdctl prints the
    lock's key). None for any other line."""
    text = line.strip()
    if system in ("curator", "kazoo"):
        if text.startswith("I lead "):
            return int(text.split()[2]) / 1000.0
        return None
    if system == "etcd":
        return seen_s if lock_name and text.startswith(f"{lock_name}/") else None
    if system == "this":
        if "took office" not in text:
            return None
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(record, dict) or not _TOOK_OFFICE.search(str(record.get("message"))):
            return None
        stamp = datetime.strptime(str(record["time"]), "%Y-%m-%d %H:%M:%S,%f")
        return stamp.timestamp()  # asctime is local time, as is this process's
    raise ValueError(f"unknown system {system!r}")


# -- the slow-disk column ---------------------------------------------------------------


@dataclass(frozen=True)
class PollRound:
    """One round of leadership polls: when it was sent (``time.monotonic()``) and, per
    candidate, whether it answered that it leads within the round's deadline (and whether
    it answered at all within it: "I do not lead" is an answer too)."""

    at: float
    claims: tuple[bool, ...]
    answered: tuple[bool, ...] = ()


#: One candidate's answer to a round: (it says it leads, when the answer came, monotonic
#: seconds); None when none came (an error, or no answer yet).
Answer = tuple[bool, float] | None


def round_claims(sent_at: float, answers: Sequence[Answer], deadline_s: float) -> tuple[bool, ...]:
    """Per candidate: it claimed leadership in the round sent at ``sent_at``, that is it
    answered "I lead" at most ``deadline_s`` after the round was sent."""
    return tuple(
        a is not None and a[0] and a[1] - sent_at <= deadline_s for a in answers
    )  # fmt: skip


def round_answered(
    sent_at: float, answers: Sequence[Answer], deadline_s: float
) -> tuple[bool, ...]:
    """Per candidate: it answered (leads or not) within ``deadline_s`` of ``sent_at``."""
    return tuple(a is not None and a[1] - sent_at <= deadline_s for a in answers)


def answered_rounds(rounds: Sequence[PollRound]) -> list[int]:
    """Per candidate: in how many of ``rounds`` it answered in time."""
    width = max((len(r.answered) for r in rounds), default=0)
    return [sum(1 for r in rounds if i < len(r.answered) and r.answered[i]) for i in range(width)]


def in_window(rounds: Sequence[PollRound], since: float, until: float) -> list[PollRound]:
    """The rounds sent in ``[since, until)``."""
    return [r for r in rounds if since <= r.at < until]


def leaderless_fraction(rounds: Sequence[PollRound]) -> float | None:
    """The fraction of ``rounds`` in which no candidate claimed leadership, in [0, 1];
    None for no rounds (nothing measured, not "always led")."""
    if not rounds:
        return None
    return sum(1 for r in rounds if not any(r.claims)) / len(rounds)


def double_claims(rounds: Sequence[PollRound]) -> int:
    """Rounds in which two or more candidates claimed leadership."""
    return sum(1 for r in rounds if sum(r.claims) > 1)


def leaderless_stretches(rounds: Sequence[PollRound]) -> list[tuple[float, float]]:
    """Each stretch of rounds with no claim, as (its first round's time, seconds from there
    to the next round with a claim, or to the last round)."""
    stretches: list[tuple[float, float]] = []
    began: float | None = None
    for r in rounds:
        if not any(r.claims):
            began = r.at if began is None else began
            continue
        if began is not None:
            stretches.append((began, r.at - began))
        began = None
    if began is not None:
        stretches.append((began, rounds[-1].at - began))
    return stretches


def longest_leaderless_s(rounds: Sequence[PollRound]) -> float:
    """Seconds of the longest stretch with no claim (:func:`leaderless_stretches`), 0 when
    every round had one."""
    return max((length for _, length in leaderless_stretches(rounds)), default=0.0)


def claimants(rounds: Sequence[PollRound]) -> list[int]:
    """The candidates (indexes into each round's claims) that claimed in any round."""
    return sorted({i for r in rounds for i, c in enumerate(r.claims) if c})


def parse_poll_reply(line: str) -> tuple[int, bool] | None:
    """A candidate's answer to the bench's ``poll N`` (bench/peers_kazoo.py, PeersLatch):
    ``poll N L [epoch ms]`` (it leads) or ``poll N F ...``; (N, leads), else None."""
    parts = line.split()
    if len(parts) < 3 or parts[0] != "poll" or parts[2] not in ("L", "F"):
        return None
    try:
        return int(parts[1]), parts[2] == "L"
    except ValueError:
        return None


def strace_command(
    pid: int, delay_s: float, syscalls: Sequence[str] = ("fdatasync", "fsync")
) -> list[str]:
    """strace delaying the return of every ``syscalls`` call of every thread of ``pid`` by
    ``delay_s`` (whole microseconds)."""
    names = ",".join(syscalls)
    return [
        "strace", "-f", "-e", f"trace={names}",
        "-e", f"inject={names}:delay_exit={round(delay_s * 1_000_000)}", "-p", str(pid),
    ]  # fmt: skip


# -- the table and the JSON -------------------------------------------------------------


def rows_p50(
    figures: dict[str, dict[str, list[float | None]]],
) -> dict[str, dict[str, float | None]]:
    """p50 seconds (to the microsecond: a graceful handover's few milliseconds rounded to
    one would move its ratio by a third) of each system and fault over its completed
    trials."""
    rows: dict[str, dict[str, float | None]] = {}
    for system, by_fault in figures.items():
        rows[system] = {}
        for fault, values in by_fault.items():
            done = [v for v in values if v is not None]
            rows[system][fault] = round(percentile(done, 50), 6) if done else None
    return rows


def best_peer(rows: dict[str, dict[str, float | None]], fault: str) -> tuple[str, float] | None:
    """The fastest system other than ``this`` on ``fault``: (name, p50 s)."""
    peers = [(v, name) for name, row in rows.items() if name != "this" if (v := row.get(fault))]
    if not peers:
        return None
    value, name = min(peers)
    return name, value


def format_cell(values: Sequence[float | None], none: str = "no leader") -> str:
    """``p50`` of the completed trials, with ``(min-max)`` when there are several and
    ``k failed`` when some trials saw no new leader (or, ``none`` = "failed", measured
    nothing); ``none`` when no trial completed."""
    done = sorted(v for v in values if v is not None)
    failed = len(values) - len(done)
    if not done:
        return none if values else "-"
    p50 = percentile(done, 50)
    places = 4 if 0 < p50 < 0.01 else 3  # milliseconds' figures keep a tenth of one
    text = f"{p50:.{places}f}"
    if len(done) > 1:
        text += f" ({done[0]:.{places}f}-{done[-1]:.{places}f})"
    if failed:
        text += f" {failed} failed"
    return text


def results_table(figures: dict[str, dict[str, list[float | None]]], faults: Sequence[str]) -> str:
    """Systems down, faults across; each cell the p50 seconds (min-max) of its trials
    (``slow-disk``: the leaderless fraction of poll rounds, no unit), then a row per fault
    with ``this`` over the best peer (none for ``slow-disk``, where the best peer's 0
    makes any ratio infinite)."""
    headers = ["system", *(f if f == SLOW_DISK else f"{f} s" for f in faults)]
    body: list[list[object]] = [
        [
            system,
            *(
                format_cell(by_fault.get(f, []), "failed" if f == SLOW_DISK else "no leader")
                for f in faults
            ),
        ]
        for system, by_fault in figures.items()
    ]
    rows = rows_p50(figures)
    if "this" in rows:
        ratios: list[object] = ["this / best peer"]
        for fault in faults:
            if fault == SLOW_DISK:
                ratios.append("-")
                continue
            best = best_peer(rows, fault)
            mine = rows["this"].get(fault)
            ratios.append(
                f"{mine / best[1]:.3f} ({best[0]})"
                if best is not None and mine is not None
                else "-"
            )
        body.append(ratios)
    return format_table(headers, body)


def result_json(
    timeout_s: float,
    figures: dict[str, dict[str, list[float | None]]],
    **extra: Any,
) -> dict[str, Any]:
    """The last line's object: ``timeout_s`` and ``rows`` (p50 s) first, then the rest."""
    per_trial = {
        system: {fault: [None if v is None else round(v, 6) for v in values]
                 for fault, values in by_fault.items()}
        for system, by_fault in figures.items()
    }  # fmt: skip
    return {
        "timeout_s": int(timeout_s) if float(timeout_s).is_integer() else timeout_s,
        "rows": rows_p50(figures),
        "per_trial_s": per_trial,
        **extra,
    }
