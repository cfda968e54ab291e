"""What a failed worker tells its user: one readable line, handed to the supervisor.

A worker that fails writes why (``FAILURE_FILE`` in its folder) before it exits; its
supervisor takes that line when it reaps the process and reports it, with the count of
failures in a row, in the slot's heartbeat, and gives both to the next worker it starts
so its heartbeats keep saying so until it commits a batch. ``describe``, ``list`` and the
UI read them from there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cluster.api import records

FAILURE_FILE = "failure.txt"
#: A worker that failed this many times in a row, without committing a batch in between,
#: shows its topology as failing. One: the user learns of a broken pipeline from its
#: first failure (about 10-20 s after submit here), not after a second Spark start.
FAILING_AFTER = 1
MAX_LINE = 500

_TRACEBACK = "Traceback (most recent call last):"


def one_line(error: BaseException | str) -> str:
    """The line of an error worth showing: a Python exception's own last line when the
    text carries a traceback (a UDF failing inside Spark), else its first line."""
    text = str(error).strip()
    if not text:
        return type(error).__name__ if isinstance(error, BaseException) else "unknown error"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    chosen = lines[0]
    if _TRACEBACK in text:
        after = text[text.rindex(_TRACEBACK) :].splitlines()[1:]
        # The exception line ends the traceback: the first line not indented as a frame.
        ends = [line.strip() for line in after if line.strip() and not line.startswith(" ")]
        if ends:
            chosen = ends[0]
    return chosen[:MAX_LINE]


def record_failure(folder: Path, line: str) -> None:
    """Leave why this worker failed for its supervisor (best effort: the exit code stays)."""
    with contextlib.suppress(OSError):
        tmp = folder / f".{FAILURE_FILE}"
        tmp.write_text(line[:MAX_LINE] + "\n")
        os.replace(tmp, folder / FAILURE_FILE)


def take_failure(folder: Path) -> str | None:
    """The line a worker left in ``folder``, removed so that it is reported once."""
    path = folder / FAILURE_FILE
    try:
        line = path.read_text(errors="replace").strip()
    except OSError:
        return None
    with contextlib.suppress(OSError):
        path.unlink()
    return line or None


@dataclass(frozen=True)
class SlotFailures:
    """A topology's worker failures as its slots' heartbeats report them."""

    failing: bool
    restarts: int
    newest: records.WorkerHeartbeat | None  # the heartbeat with the newest failure line


def slot_failures(beats: Iterable[records.WorkerHeartbeat]) -> SlotFailures:
    beats = list(beats)
    return SlotFailures(
        failing=any(b.failures_in_a_row >= FAILING_AFTER for b in beats),
        restarts=sum(b.restarts for b in beats),
        newest=max((b for b in beats if b.last_error), key=lambda b: b.time_ms, default=None),
    )
