"""The final ZooKeeper state the checkers judge: records with their zxids, and the terms.

A term's start is the czxid of ``<root>/epochs/<n>``: ``fencing.office.take_office``
creates that node in the very multi-op that makes the holder leader, so the term of
epoch n is every zxid from that start up to the next term's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths


@dataclass(frozen=True)
class Term:
    epoch: int
    start_zxid: int
    holder: str


@dataclass(frozen=True)
class Stored:
    """One record carrying an epoch, where ZooKeeper last changed it."""

    path: str
    epoch: int
    mzxid: int
    record: Any


@dataclass
class ZkState:
    terms: dict[int, Term] = field(default_factory=dict)
    storms: dict[str, Stored] = field(default_factory=dict)
    requests: dict[str, Stored] = field(default_factory=dict)
    others: list[Stored] = field(default_factory=list)  # leader-epoch, assignments, errors

    def epoch_records(self) -> list[Stored]:
        return [*self.storms.values(), *self.requests.values(), *self.others]


def _read(client: KazooClient, path: str, parse: Any) -> Stored | None:
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return None
    try:
        record = parse(data)
    except DecodeError:
        return Stored(path, -1, int(stat.mzxid), None)
    return Stored(path, int(record.epoch), int(stat.mzxid), record)


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


def read_state(client: KazooClient, root: str) -> ZkState:
    """Everything the checkers need, after a ``sync`` so the server we ask is current."""
    paths = Paths(root)
    client.sync(root)
    state = ZkState()
    for name in _children(client, paths.epochs):
        if not name.isdigit():
            continue
        try:
            data, stat = client.get(f"{paths.epochs}/{name}")
        except NoNodeError:
            continue
        holder = records.EpochRecord.FromString(data).holder
        state.terms[int(name)] = Term(int(name), int(stat.czxid), holder)
    for tid in _children(client, paths.storms):
        stored = _read(client, paths.storm(tid), records.StormBase.FromString)
        if stored is not None:
            state.storms[tid] = stored
    for rid in _children(client, paths.requests):
        stored = _read(client, paths.request(rid), records.RequestOutcome.FromString)
        if stored is not None:
            state.requests[rid] = stored
    epoch = _read(client, paths.leader_epoch, records.LeaderEpoch.FromString)
    if epoch is not None:
        state.others.append(epoch)
    for tid in _children(client, paths.assignments):
        stored = _read(client, paths.assignment(tid), records.Assignment.FromString)
        if stored is not None:
            state.others.append(stored)
    for tid in _children(client, paths.errors):
        for component in _children(client, f"{paths.errors}/{tid}"):
            folder = f"{paths.errors}/{tid}/{component}"
            for name in _children(client, folder):
                stored = _read(client, f"{folder}/{name}", records.ErrorInfo.FromString)
                if stored is not None:
                    state.others.append(stored)
    return state


def registered_holders(client: KazooClient, root: str) -> dict[str, set[str]]:
    """Who ZooKeeper says holds each topology's code (``/code-distributor``), for reports.

    Kept small and separate: the layout of these registrations is being changed, and the
    checkers' verdict on code (S3) rests on the replicas' disks, not on this.
    """
    paths = Paths(root)
    return {
        tid: set(_children(client, paths.code_holders(tid)))
        for tid in _children(client, paths.code_distributor)
    }
