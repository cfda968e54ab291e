"""What a chaos run records: every client call, every fault, on one monotonic clock.

Times are seconds since the history's ``t0``. Checkers read only this record and the
final ZooKeeper state, never the live processes, so a history can be saved and checked
again, and a violation can be planted in it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Outcome = Literal["ok", "fail", "unknown"]
WRITES = ("submit", "kill")


@dataclass
class Call:
    """One client call. ``fail`` means refused for sure; ``unknown`` may have landed."""

    worker: int
    kind: str  # submit, kill, leader
    name: str
    request_id: str
    start: float
    end: float = 0.0
    outcome: Outcome = "unknown"
    code: str = ""
    topology_id: str = ""
    digest: str = ""
    reply_epoch: int = 0
    epoch_seen: int = 0  # the client's highest epoch after the call
    detail: str = ""
    # Replicas that answered "I am the leader" during the call, as they sent it.
    leader_claims: list[tuple[str, int]] = field(default_factory=list)
    # An acknowledged submit's code holders read from ZooKeeper right after the ack (None
    # when ZooKeeper could not be read then, e.g. without a quorum: no evidence either
    # way), and the replicas whose store then held a verified copy.
    holders_at_ack: list[str] | None = field(default_factory=list)
    copies_at_ack: list[int] = field(default_factory=list)


@dataclass
class Fault:
    """One injected fault: ``start`` when injected, ``healed`` when undone."""

    name: str
    trial: int
    start: float
    healed: float = 0.0
    target: str = ""
    epoch_before: int = 0
    epoch_after: int = 0
    leader_after: int = -1  # the replica leading once recovered
    recovered: bool = False
    note: str = ""
    # From the fault to the new leader taking office: the ctime ZooKeeper gave the
    # ``/epochs/<n>`` node that the fenced take-office multi-op created. None: no new term.
    failover_s: float | None = None
    # A ZooKeeper server's ``zk_digest_mismatches_count`` rose during the trial (ZooKeeper
    # itself diverged, ``tests/chaos/zk_digest.py``); None: not read.
    zk_diverged: bool | None = None


@dataclass
class History:
    t0: float = field(default_factory=time.monotonic)
    wall0: float = field(default_factory=time.time)  # wall clock at t0 (ZooKeeper's ctimes)
    calls: list[Call] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    # (sent, received, replica, epoch): a replica answered "I am the leader" of that epoch.
    leadership: list[tuple[float, float, int, int]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def at_wall(self, wall: float) -> float:
        """A wall-clock time (a ZooKeeper ctime) on this history's timeline."""
        return wall - self.wall0

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def add_fault(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def ok_writes(self) -> list[Call]:
        return [c for c in self.snapshot() if c.kind in WRITES and c.outcome == "ok"]

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "calls": [asdict(c) for c in self.calls],
                "faults": [asdict(f) for f in self.faults],
                "leadership": self.leadership,
            }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: Path) -> History:
        data = json.loads(path.read_text())
        history = cls(t0=0.0)
        history.calls = [Call(**c) for c in data["calls"]]
        history.faults = [Fault(**f) for f in data["faults"]]
        history.leadership = [
            (s[0], s[0], s[1], s[2]) if len(s) == 3 else (s[0], s[1], s[2], s[3])
            for s in data["leadership"]
        ]
        return history
