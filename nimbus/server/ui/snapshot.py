"""The UI's view model: plain JSON-ready dicts built from this replica's caches.

Every page and every ``/api/v1/`` answer comes from here, so the JSON API and the
page always agree. Nothing reads ZooKeeper directly: the leader cache, the ``/storms``
cache and the UI's mirror are all fed by watches.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.message import DecodeError, Message

from cluster.api import records
from cluster.paths import Paths, worker_name
from leader.discovery import LeaderInfo, lock_sequence
from nimbus.server.ui.graph import GraphCache
from nimbus.server.ui.holders import DEPTH as HOLDERS_DEPTH
from nimbus.server.ui.holders import code_holders
from nimbus.server.ui.mirror import ZkMirror
from nimbus.views import component_metrics
from pipeline.failures import slot_failures

Json = dict[str, Any]
M = TypeVar("M", bound=Message)
ERRORS_SHOWN = 10


def mirrored_folders(paths: Paths) -> list[str]:
    """The folders the UI mirrors besides what the daemon's own caches already watch."""
    return [
        paths.leader_lock,  # the queue: who leads next
        paths.epochs,
        paths.supervisors,
        paths.assignments,
        paths.workerbeats,
        paths.errors,
        paths.code_distributor,
    ]


@dataclass(frozen=True)
class Sources:
    """Where the view reads from; all in memory, all watch-fed."""

    served_by: str
    paths: Paths
    connected: Callable[[], bool]
    leader: Callable[[], LeaderInfo | None]
    nimbuses: Callable[[], Mapping[str, records.NimbusSummary]]
    storms: Callable[[], Mapping[str, records.StormBase]]
    mirror: ZkMirror
    graphs: GraphCache
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000)


def _parse(nodes: Mapping[str, bytes], kind: Callable[[bytes], M]) -> dict[str, M]:
    parsed: dict[str, M] = {}
    for name, data in nodes.items():
        try:
            parsed[name] = kind(data)
        except DecodeError:
            continue  # a damaged record is left out of the view, as elsewhere
    return parsed


def _age_s(now_ms: int, then_ms: int) -> float | None:
    return round(max(0, now_ms - then_ms) / 1000.0, 1) if then_ms else None


def status_name(status: int) -> str:
    try:
        return str(records.TopologyStatus.Name(status))
    except ValueError:
        return f"STATUS_{status}"


def terms(
    history: Mapping[str, records.EpochRecord], leader: LeaderInfo | None, now_ms: int
) -> list[Json]:
    """One entry per recorded term, oldest first; a term ends when the next one starts.

    The newest term is ``current`` only while its holder still leads; otherwise its end
    is unknown (its holder died or left) and ``ended_ms`` stays null.
    """
    ordered = sorted(history.values(), key=lambda r: r.epoch)
    result: list[Json] = []
    for i, record in enumerate(ordered):
        following = ordered[i + 1] if i + 1 < len(ordered) else None
        current = following is None and leader is not None and leader.epoch == record.epoch
        ended = following.started_ms if following is not None else None
        until = ended if ended is not None else now_ms
        result.append(
            {
                "epoch": record.epoch,
                "holder": record.holder,
                "started_ms": record.started_ms,
                "ended_ms": ended,
                "length_s": round(max(0, until - record.started_ms) / 1000.0, 1),
                "current": current,
            }
        )
    return result


class ClusterView:
    """Builds the snapshots; throughput needs the previous heartbeat, so it keeps state."""

    def __init__(self, sources: Sources) -> None:
        self._s = sources
        self._rates: dict[tuple[str, str], tuple[int, int, float]] = {}

    # -- whole cluster -------------------------------------------------------------------

    def cluster(self) -> Json:
        s = self._s
        now = s.now_ms()
        leader = s.leader()
        storms = dict(s.storms())
        assignments = self._assignments()
        return {
            "served_by": s.served_by,
            "zookeeper": {"connected": s.connected()},
            "now_ms": now,
            "leader": self._leader(leader, now),
            "next_in_line": self._next_in_line(leader),
            "replicas": self._replicas(leader, now),
            "epochs": terms(self._epochs(), leader, now),
            "topologies": self._topologies(storms, assignments, now),
            "supervisors": self._supervisors(storms, assignments, now),
        }

    def _leader(self, leader: LeaderInfo | None, now: int) -> Json | None:
        if leader is None:
            return None
        return {
            "address": leader.address,
            "epoch": leader.epoch,
            "since_ms": leader.since_ms,
            "term_s": _age_s(now, leader.since_ms),
        }

    def _next_in_line(self, leader: LeaderInfo | None) -> str | None:
        """The replica that leads next if the leader stops or hands over (``nimbus
        handover`` without ``--to``): the first queued after the leader's lock node."""
        queue = self._s.mirror.subtree(self._s.paths.leader_lock)
        for name in sorted(queue, key=lock_sequence):
            address = queue[name].decode(errors="replace")
            if leader is None or address != leader.address:
                return address
        return None

    def _replicas(self, leader: LeaderInfo | None, now: int) -> list[Json]:
        rows = []
        for address, n in sorted(self._s.nimbuses().items()):
            is_leader = leader is not None and leader.address == address
            rows.append(
                {
                    "address": address,
                    "is_leader": is_leader,
                    "role": "leader" if is_leader else "follower",
                    "epoch": n.epoch,
                    "uptime_s": _age_s(now, n.start_time_ms),
                    "code_sync_lag": n.code_sync_lag,
                    "health": "in sync" if n.code_sync_lag == 0 else "syncing code",
                    "version": n.version,
                    "serving_this_page": address == self._s.served_by,
                }
            )
        return rows

    def epochs(self) -> list[Json]:
        return terms(self._epochs(), self._s.leader(), self._s.now_ms())

    def _epochs(self) -> dict[str, records.EpochRecord]:
        nodes = self._s.mirror.subtree(self._s.paths.epochs)
        return _parse(nodes, records.EpochRecord.FromString)

    # -- topologies -----------------------------------------------------------------------

    def _assignments(self) -> dict[str, records.Assignment]:
        nodes = self._s.mirror.subtree(self._s.paths.assignments)
        return _parse(nodes, records.Assignment.FromString)

    def _errors(self) -> dict[str, list[records.ErrorInfo]]:
        """topology id -> its errors, newest first."""
        nodes = self._s.mirror.subtree(self._s.paths.errors, depth=3)
        by_topology: dict[str, list[records.ErrorInfo]] = {}
        for rel, error in _parse(nodes, records.ErrorInfo.FromString).items():
            by_topology.setdefault(rel.split("/", 1)[0], []).append(error)
        for errors in by_topology.values():
            errors.sort(key=lambda e: e.time_ms, reverse=True)
        return by_topology

    def _topologies(
        self,
        storms: Mapping[str, records.StormBase],
        assignments: Mapping[str, records.Assignment],
        now: int,
    ) -> list[Json]:
        holders = code_holders(
            self._s.mirror.subtree(self._s.paths.code_distributor, depth=HOLDERS_DEPTH),
            {tid: base.digest for tid, base in storms.items()},
            live=set(self._s.nimbuses()),
        )
        errors = self._errors()
        beats = self._beats()
        rows = [
            self._topology_row(tid, base, assignments.get(tid), holders[tid], errors.get(tid), now)
            | _failure_fields(beats.get(tid, []), now)
            for tid, base in storms.items()
        ]
        return sorted(rows, key=lambda r: str(r["name"]))

    def _topology_row(
        self,
        tid: str,
        base: records.StormBase,
        assignment: records.Assignment | None,
        holders: list[str],
        errors: list[records.ErrorInfo] | None,
        now: int,
    ) -> Json:
        last = errors[0] if errors else None
        return {
            "id": tid,
            "name": base.name,
            "status": status_name(base.status),
            "epoch": base.epoch,
            "digest": base.digest,
            "workers": len(assignment.slots) if assignment else 0,
            "workers_wanted": base.num_workers,
            "uptime_s": _age_s(now, base.launch_time_ms),
            "code_replicas": holders,
            "last_error": _error(last, now) if last else None,
        }

    def topologies(self) -> list[Json]:
        storms = dict(self._s.storms())
        return self._topologies(storms, self._assignments(), self._s.now_ms())

    def topology(self, name: str) -> Json | None:
        """The topology page: summary, component graph, workers, throughput, errors."""
        now = self._s.now_ms()
        storms = dict(self._s.storms())
        found = [tid for tid, base in storms.items() if base.name == name]
        if not found:
            return None
        tid = found[0]
        base = storms[tid]
        assignments = self._assignments()
        row = next(r for r in self._topologies(storms, assignments, now) if r["id"] == tid)
        workers = self._workers(tid, assignments.get(tid), now)
        return {
            "served_by": self._s.served_by,
            "zookeeper": {"connected": self._s.connected()},
            "now_ms": now,
            "topology": row,
            "component_parallelism": dict(base.component_parallelism),
            "config_json": base.config_json,
            "graph": self._graph(base),
            "workers": workers,
            "rows_per_s": round(sum(w["rows_per_s"] or 0.0 for w in workers), 1),
            "errors": [_error(e, now) for e in self._errors().get(tid, [])[:ERRORS_SHOWN]],
        }

    def _graph(self, base: records.StormBase) -> Json | None:
        """The graph recorded at submit when there is one; else read from the package."""
        recorded = _recorded_graph(getattr(base, "components_json", ""))
        if recorded is not None:
            return recorded
        return self._s.graphs.get(base.digest) if base.digest else None

    def _beats(self) -> dict[str, list[records.WorkerHeartbeat]]:
        """topology id -> the heartbeats of its slots."""
        by_topology: dict[str, list[records.WorkerHeartbeat]] = {}
        for rel, beat in self._worker_beats().items():
            by_topology.setdefault(rel.split("/", 1)[0], []).append(beat)
        return by_topology

    def _worker_beats(self) -> dict[str, records.WorkerHeartbeat]:
        return _parse(
            self._s.mirror.subtree(self._s.paths.workerbeats, depth=2),
            records.WorkerHeartbeat.FromString,
        )

    def _workers(self, tid: str, assignment: records.Assignment | None, now: int) -> list[Json]:
        beats = self._worker_beats()
        rows = []
        for slot in assignment.slots if assignment else []:
            name = worker_name(slot.supervisor_id, slot.slot)
            beat = beats.get(f"{tid}/{name}")
            rows.append(
                {
                    "supervisor_id": slot.supervisor_id,
                    "slot": slot.slot,
                    "host": slot.host,
                    "state": beat.status if beat else "no heartbeat",
                    "heartbeat_age_s": _age_s(now, beat.time_ms) if beat else None,
                    "batches_committed": beat.batches_committed if beat else 0,
                    "rows_processed": beat.rows_processed if beat else 0,
                    "rows_per_s": self._rate(tid, name, beat) if beat else None,
                    "last_error": beat.last_error if beat else "",
                    "failures_in_a_row": beat.failures_in_a_row if beat else 0,
                    "restarts": beat.restarts if beat else 0,
                    "log": beat.log_path if beat else "",
                    "partitioning_note": beat.partitioning_note if beat else "",
                    "components": [component_metrics(c) for c in beat.components] if beat else [],
                }
            )
        return rows

    def _rate(self, tid: str, name: str, beat: records.WorkerHeartbeat) -> float | None:
        """The worker's own rate, else rows per second between the last two distinct
        heartbeats this view has seen."""
        if beat.rows_per_s:
            return round(beat.rows_per_s, 1)
        key = (tid, name)
        seen = self._rates.get(key)
        if seen is None or beat.time_ms < seen[0]:
            self._rates[key] = (beat.time_ms, beat.rows_processed, 0.0)
            return None
        then_ms, then_rows, rate = seen
        if beat.time_ms > then_ms:
            rate = max(0.0, (beat.rows_processed - then_rows) * 1000.0 / (beat.time_ms - then_ms))
            self._rates[key] = (beat.time_ms, beat.rows_processed, rate)
        return round(rate, 1)

    # -- supervisors ----------------------------------------------------------------------

    def _supervisors(
        self,
        storms: Mapping[str, records.StormBase],
        assignments: Mapping[str, records.Assignment],
        now: int,
    ) -> list[Json]:
        infos = _parse(
            self._s.mirror.subtree(self._s.paths.supervisors), records.SupervisorInfo.FromString
        )
        placed: dict[str, list[Json]] = {}
        for tid, assignment in assignments.items():
            name = storms[tid].name if tid in storms else tid
            for slot in assignment.slots:
                placed.setdefault(slot.supervisor_id, []).append(
                    {"topology": name, "topology_id": tid, "slot": slot.slot}
                )
        rows = []
        for sid, info in sorted(infos.items()):
            workers = sorted(placed.get(sid, []), key=lambda w: int(w["slot"]))
            rows.append(
                {
                    "id": sid,
                    "host": info.host,
                    "slots_total": info.slots_total,
                    "slots_used": len(workers),
                    "slots_free": max(0, info.slots_total - len(workers)),
                    "uptime_s": _age_s(now, info.start_time_ms),
                    "heartbeat_age_s": _age_s(now, info.heartbeat_ms),
                    "workers": workers,
                }
            )
        return rows

    def supervisors(self) -> list[Json]:
        storms = dict(self._s.storms())
        return self._supervisors(storms, self._assignments(), self._s.now_ms())


def _recorded_graph(text: str) -> Json | None:
    """``StormBase.components_json`` (the submit-time check's graph) as a ready graph."""
    if not text:
        return None
    try:
        components = json.loads(text)
    except ValueError:
        return None
    if not isinstance(components, list) or not all(isinstance(c, dict) for c in components):
        return None
    return {"status": "ready", "components": components, "source": "record"}


def _failure_fields(beats: list[records.WorkerHeartbeat], now: int) -> Json:
    """A topology's worker failures as its slots' heartbeats report them."""
    failures = slot_failures(beats)
    fields: Json = {"failing": failures.failing, "worker_restarts": failures.restarts}
    newest = failures.newest
    if newest is not None:  # a worker's failure: newer news than the recorded errors
        fields["last_error"] = {
            "component": "worker",
            "message": newest.last_error,
            "age_s": _age_s(now, newest.time_ms),
            "host": newest.supervisor_id,
        }
    return fields


def _error(error: records.ErrorInfo, now: int) -> Json:
    return {
        "component": error.component,
        "message": error.message,
        "time_ms": error.time_ms,
        "age_s": _age_s(now, error.time_ms),
        "host": error.host,
    }
