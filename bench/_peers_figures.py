"""bench/peers.py's pure parts: the run order, the "I lead" lines, the table and the JSON
(tests/test_peers_bench.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from _common import format_table, percentile

_TOOK_OFFICE = re.compile(r": took office, epoch \d+")


# -- pure parts (tests/test_peers_bench.py) ---------------------------------------------


def schedule(
    systems: Sequence[str], faults: Sequence[str], trials: int
) -> list[tuple[int, str, str]]:
    """``(round, fault, system)`` in run order: round i of every fault and system before
    round i + 1, the systems' order rotated by one each round (no system always first)."""
    order: list[tuple[int, str, str]] = []
    for i in range(trials):
        shift = i % len(systems) if systems else 0
        rotated = [*systems[shift:], *systems[:shift]]
        for fault in faults:
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


def rows_p50(
    figures: dict[str, dict[str, list[float | None]]],
) -> dict[str, dict[str, float | None]]:
    """p50 seconds (3 decimals) of each system and fault over its completed trials."""
    rows: dict[str, dict[str, float | None]] = {}
    for system, by_fault in figures.items():
        rows[system] = {}
        for fault, values in by_fault.items():
            done = [v for v in values if v is not None]
            rows[system][fault] = round(percentile(done, 50), 3) if done else None
    return rows


def best_peer(rows: dict[str, dict[str, float | None]], fault: str) -> tuple[str, float] | None:
    """The fastest system other than ``this`` on ``fault``: (name, p50 s)."""
    peers = [(v, name) for name, row in rows.items() if name != "this" if (v := row.get(fault))]
    if not peers:
        return None
    value, name = min(peers)
    return name, value


def format_cell(values: Sequence[float | None]) -> str:
    """``p50`` of the completed trials, with ``(min-max)`` when there are several and
    ``k failed`` when some trials saw no new leader."""
    done = sorted(v for v in values if v is not None)
    failed = len(values) - len(done)
    if not done:
        return "no leader" if values else "-"
    text = f"{percentile(done, 50):.3f}"
    if len(done) > 1:
        text += f" ({done[0]:.3f}-{done[-1]:.3f})"
    if failed:
        text += f" {failed} failed"
    return text


def results_table(figures: dict[str, dict[str, list[float | None]]], faults: Sequence[str]) -> str:
    """Systems down, faults across; each cell the p50 seconds (min-max) of its trials,
    then a row per fault with ``this`` over the best peer."""
    headers = ["system", *(f"{f} s" for f in faults)]
    body: list[list[object]] = [
        [system, *(format_cell(by_fault.get(f, [])) for f in faults)]
        for system, by_fault in figures.items()
    ]
    rows = rows_p50(figures)
    if "this" in rows:
        ratios: list[object] = ["this / best peer"]
        for fault in faults:
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
        system: {fault: [None if v is None else round(v, 4) for v in values]
                 for fault, values in by_fault.items()}
        for system, by_fault in figures.items()
    }  # fmt: skip
    return {
        "timeout_s": int(timeout_s) if float(timeout_s).is_integer() else timeout_s,
        "rows": rows_p50(figures),
        "per_trial_s": per_trial,
        **extra,
    }
