"""A supervisor's local record of its workers, so a restarted supervisor adopts them.

Workers run in sessions of their own and outlive a supervisor killed with SIGKILL. The
supervisor writes ``worker.json`` (pid, the process's start time, topology, slot, code
digest) beside each worker when it starts it; a restarted supervisor reads these files
and adopts every worker whose pid is alive with the same start time (a reused pid has a
different one), instead of starting a second worker for the slot. The worker's claim in
ZooKeeper stays the final word: even a duplicate could not claim or publish.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

RECORD = "worker.json"


@dataclass(frozen=True)
class WorkerRecord:
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: tells a reused pid apart
    topology_id: str
    slot: int
    digest: str


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name may hold spaces and ')'
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_alive(record: WorkerRecord) -> bool:
    """True while the recorded process runs (not exited, not a reused pid)."""
    return start_ticks(record.pid) == record.start_ticks


def save(folder: Path, record: WorkerRecord) -> None:
    """Write ``worker.json`` atomically (temp file, rename)."""
    tmp = folder / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(asdict(record)))
    os.replace(tmp, folder / RECORD)


def forget(folder: Path) -> None:
    (folder / RECORD).unlink(missing_ok=True)


def load(folder: Path) -> WorkerRecord | None:
    """The record in ``folder``; None when missing or unreadable (logged)."""
    path = folder / RECORD
    try:
        raw = json.loads(path.read_text())
        return WorkerRecord(
            pid=int(raw["pid"]),
            start_ticks=int(raw["start_ticks"]),
            topology_id=str(raw["topology_id"]),
            slot=int(raw["slot"]),
            digest=str(raw["digest"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring unreadable worker record %s: %s", path, e)
        return None


def running_workers(workers_dir: Path) -> list[WorkerRecord]:
    """Records of workers still alive under ``workers_dir`` (one folder per topology)."""
    found: list[WorkerRecord] = []
    if not workers_dir.is_dir():
        return found
    for folder in sorted(workers_dir.iterdir()):
        record = load(folder) if folder.is_dir() else None
        if record is None:
            continue
        if is_alive(record):
            found.append(record)
        else:
            forget(folder)
    return found
