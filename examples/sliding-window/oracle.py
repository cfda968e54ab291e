"""The expected windows of ``topology.py``, in plain Python from the input lines.

A window of length L sliding by S is [start, start + L) for every start that is a
multiple of S (a tumbling window: S = L). It is emitted once the newest event time less
the 5 s lateness reaches its end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

LATENESS = 5


def _seconds(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def windows(lines: Iterable[str], size: int, slide: int) -> dict[int, list[int]]:
    """Window start (epoch seconds) -> the values in it, for closed windows only."""
    found: dict[int, list[int]] = defaultdict(list)
    newest = None
    for line in lines:
        stamp, value = line.split(" ")[:2]
        t = _seconds(stamp)
        newest = t if newest is None else max(newest, t)
        for start in range(t - t % slide - size + slide, t + 1, slide):
            if start <= t < start + size:
                found[start].append(int(value))
    if newest is None:
        return {}
    return {s: v for s, v in sorted(found.items()) if s + size <= newest - LATENESS}


def sliding(lines: Iterable[str]) -> dict[int, dict[str, int]]:
    return {
        s: {"count": len(v), "sum": sum(v), "min": min(v), "max": max(v)}
        for s, v in windows(lines, 20, 10).items()
    }


def tumbling(lines: Iterable[str]) -> dict[int, dict[str, float]]:
    return {s: {"count": len(v), "avg": sum(v) / len(v)} for s, v in windows(lines, 30, 30).items()}


def corpus(seconds: int = 240, seed: int = 11) -> list[str]:
    import random

    rng = random.Random(seed)
    base = datetime(2026, 1, 1)
    lines = []
    for s in range(seconds):
        stamp = (base + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines += [f"{stamp} {rng.randint(-50, 100)}" for _ in range(rng.randint(0, 3))]
    return lines
