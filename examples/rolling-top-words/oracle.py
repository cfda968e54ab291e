"""The expected rankings of ``topology.py``, computed in plain Python from the input lines.

A window is [start, start + 30 s) for every start that is a multiple of 10 s; a row
belongs to the three windows that contain its time. A window is emitted once the largest
event time seen, less the 5 s lateness, reaches its end. Within a window words rank by
count, ties by the word, larger first; the top ``n`` are kept.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

SIZE, SLIDE, LATENESS = 30, 10, 5


def _seconds(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def rankings(lines: Iterable[str], n: int = 3) -> dict[int, list[tuple[str, int]]]:
    """Window start (epoch seconds) -> [(word, count), ...] best first, closed windows only."""
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    newest = None
    for line in lines:
        stamp, word = line.split(" ")[:2]
        t = _seconds(stamp)
        newest = t if newest is None else max(newest, t)
        first = t - t % SLIDE - SIZE + SLIDE
        for start in range(first, t + 1, SLIDE):
            if start <= t < start + SIZE:
                counts[start][word.lower()] += 1
    if newest is None:
        return {}
    watermark = newest - LATENESS
    return {
        start: sorted(c.items(), key=lambda wc: (wc[1], wc[0]), reverse=True)[:n]
        for start, c in sorted(counts.items())
        if start + SIZE <= watermark
    }


def corpus(seconds: int = 300, seed: int = 7) -> list[str]:
    """Deterministic events: a few words per second, some more frequent than others."""
    import random

    rng = random.Random(seed)
    words = ["storm", "spark", "nimbus", "zookeeper", "bolt", "spout", "tuple", "stream"]
    weights = [8, 7, 5, 4, 3, 3, 2, 1]
    base = datetime(2026, 1, 1)
    lines = []
    for s in range(seconds):
        stamp = (base + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines += [f"{stamp} {w}" for w in rng.choices(words, weights, k=rng.randint(1, 4))]
    return lines
