"""The expected join of ``topology.py``, in plain Python from the two inputs' lines.

A gender row and an age row with the same id meet when their event times are at most
10 s apart. The inputs keep each side's times increasing, so no row is later than the
watermark and none is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

WITHIN = 10


def _seconds(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def joined(gender: Iterable[str], age: Iterable[str]) -> list[tuple[int, str, int, int, int]]:
    """Sorted (id, gender, gender time, age, age time), times in epoch seconds."""
    ages: dict[int, list[tuple[int, int]]] = {}
    for line in age:
        stamp, ident, value = line.split(" ")
        ages.setdefault(int(ident), []).append((int(value), _seconds(stamp)))
    out = []
    for line in gender:
        stamp, ident, value = line.split(" ")
        t = _seconds(stamp)
        for years, at in ages.get(int(ident), []):
            if abs(at - t) <= WITHIN:
                out.append((int(ident), value, t, years, at))
    return sorted(out)


def corpus(people: int = 300, seed: int = 3) -> tuple[list[str], list[str]]:
    """Each person's gender and age events, a few seconds apart (some too far to meet)."""
    import random

    rng = random.Random(seed)
    base = datetime(2026, 1, 1)
    gender, age = [], []
    for i in range(people):
        t = base + timedelta(seconds=i)
        lag = rng.choice([0, 3, 7, 12, 25])
        stamp, later = (x.strftime("%Y-%m-%dT%H:%M:%SZ") for x in (t, t + timedelta(seconds=lag)))
        gender.append(f"{stamp} {i} {rng.choice(['male', 'female'])}")
        age.append(f"{later} {i} {rng.randint(1, 99)}")
    age.sort()
    return gender, age
