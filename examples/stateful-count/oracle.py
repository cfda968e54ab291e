"""The expected counts of ``topology.py``, computed in plain Python from the input lines.

A word is a lower-cased run of letters, digits and apostrophes (the topology's split);
its count is how often it occurs in all lines read so far. The rule is written again here,
not imported, so that the oracle checks the topology rather than repeats it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

_SEPARATOR = re.compile(r"[^a-z0-9']+")


def counts(lines: Iterable[str]) -> dict[str, int]:
    """Word -> its number of occurrences in ``lines``."""
    return dict(Counter(w for line in lines for w in _SEPARATOR.split(line.lower()) if w))
