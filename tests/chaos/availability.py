"""Unavailability figures from a history: gaps in acknowledged writes around each fault.

``gap``: from the last write acknowledged before the fault to the first acknowledged
after it (the issue's window). ``after_heal``: from the moment the fault was undone to
the first write acknowledged after that, the figure for faults that keep the service
down by nature. Resolution is the workload's rate plus the client's backoff (<= 0.25 s).
These are measurements for the bench report, never test asserts.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from leader.settings import DEFAULT_SILENCE_WINDOW
from tests.chaos.history import Fault, History

# The acceptance target of each fault kind, as (figure, bound in seconds given T).
TARGETS: dict[str, tuple[str, str]] = {
    "T+2": ("gap", "<= T + 2 s"),
    "1": ("gap", "<= 1 s"),
    "2T+2": ("gap", "<= 2T + 2 s"),
    "heal+2": ("after_heal", "<= 2 s after heal"),
    "P+2": ("gap", "<= P + 2 s (P: the silence window)"),
    "same-leader": ("epoch", "no change of leader"),
    "none": ("gap", "no target"),
}


def bound(target: str, session_timeout: float) -> float | None:
    return {
        "T+2": session_timeout + 2,
        "1": 1.0,
        "2T+2": 2 * session_timeout + 2,
        "heal+2": 2.0,
        "P+2": DEFAULT_SILENCE_WINDOW + 2,
    }.get(target)


@dataclass(frozen=True)
class Window:
    gap: float | None  # None: no acknowledged write after the fault
    after_heal: float | None
    leader_changed: bool


def window(history: History, fault: Fault) -> Window:
    ends = sorted(c.end for c in history.ok_writes())
    i = bisect.bisect_right(ends, fault.start)
    before = ends[i - 1] if i > 0 else None
    after = ends[i] if i < len(ends) else None
    gap = after - before if after is not None and before is not None else None
    j = bisect.bisect_right(ends, fault.healed)
    after_heal = ends[j] - fault.healed if j < len(ends) else None
    changed = fault.recovered and fault.epoch_after != fault.epoch_before
    return Window(gap, after_heal, changed)


def met(target: str, w: Window, session_timeout: float) -> bool | None:
    """Whether one trial met its target (None: no target applies)."""
    if target == "same-leader":
        return not w.leader_changed
    limit = bound(target, session_timeout)
    if limit is None:
        return None
    value = w.after_heal if target == "heal+2" else w.gap
    return value is not None and value <= limit
