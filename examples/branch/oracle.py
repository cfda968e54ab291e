"""The expected streams of ``topology.py``: the even and the odd numbers of the input."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def streams(lines: Iterable[str]) -> dict[str, Counter[int]]:
    numbers = [int(line) for line in lines if line.strip()]
    return {
        "even": Counter(n for n in numbers if n % 2 == 0),
        "odd": Counter(n for n in numbers if n % 2 != 0),
    }
