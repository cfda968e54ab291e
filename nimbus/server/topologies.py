"""Read-only views for ``ListTopologies``, ``GetTopology``, ``GetClusterSummary`` (any replica)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import pb, records
from cluster.apierror import ApiError
from cluster.names import check_name
from cluster.paths import Paths, worker_name
from cluster.reads import live_replicas, read_holders_of, read_storms
from pipeline.failures import slot_failures

log = logging.getLogger(__name__)


def _summary(
    client: KazooClient,
    paths: Paths,
    topology_id: str,
    base: records.StormBase,
    live: frozenset[str],
    slot_beats: dict[str, records.WorkerHeartbeat] | None = None,
    errors: list[records.ErrorInfo] | None = None,
) -> pb.TopologySummary:
    """``slot_beats`` and ``errors`` when the caller has read them already."""
    if slot_beats is None:
        with ThreadPoolExecutor(1, thread_name_prefix="summary") as aside:  # both at once
            beats_read = aside.submit(_worker_beats, client, paths, topology_id)
            holders = read_holders_of(client, paths, topology_id, live)
            slot_beats = beats_read.result()
    else:
        holders = read_holders_of(client, paths, topology_id, live)
    now_ms = int(time.time() * 1000)
    failures = slot_failures(slot_beats.values())
    last_error = failures.newest.last_error if failures.newest is not None else ""
    if not last_error:
        newest = errors if errors is not None else recent_errors(client, paths, topology_id, 1)
        last_error = newest[0].message if newest else ""
    return pb.TopologySummary(
        id=topology_id,
        name=base.name,
        status=base.status,
        epoch=base.epoch,
        digest=base.digest,
        launch_time_ms=base.launch_time_ms,
        uptime_s=max(0.0, (now_ms - base.launch_time_ms) / 1000.0) if base.launch_time_ms else 0,
        num_workers=base.num_workers,
        code_replicas=[r for r in holders.replicas if holders.digest == base.digest],
        owner=base.owner,
        last_error=last_error,
        failing=failures.failing,
        worker_restarts=failures.restarts,
    )


def _worker_beats(
    client: KazooClient, paths: Paths, topology_id: str
) -> dict[str, records.WorkerHeartbeat]:
    """Slot name -> heartbeat, for every slot of the topology (its worker's, or its
    supervisor's while no worker lives)."""
    try:
        names = client.get_children(paths.workerbeats_of(topology_id))
    except NoNodeError:
        return {}
    beats = _read_all(
        client, {name: paths.workerbeat(topology_id, name) for name in names},
        records.WorkerHeartbeat,
    )  # fmt: skip
    return {name: beat for name, beat in beats.items() if beat is not None}


#: Reads of one listing in flight at once (threads sharing the one session).
LIST_READERS = 8


def list_topologies(client: KazooClient, paths: Paths) -> pb.ListTopologiesResponse:
    """Every topology's summary. The reads of different topologies go out together: one
    session's requests are answered in order but pipelined, and a ZooKeeper whose disk is
    slow holds every read for an fsync or two, so a listing read one by one took (reads x
    fsync) and outlived the client's deadline; together it takes about one summary's."""
    with ThreadPoolExecutor(LIST_READERS, thread_name_prefix="list") as pool:
        live_read = pool.submit(live_replicas, client, paths)
        storms = read_storms(client, paths)
        live = live_read.result()
        summaries = [
            pool.submit(_summary, client, paths, tid, base, live)
            for tid, base in sorted(storms.items())
        ]
        return pb.ListTopologiesResponse(topologies=[f.result() for f in summaries])


def list_supervisors(client: KazooClient, paths: Paths) -> list[records.SupervisorInfo]:
    """Every registered supervisor, by id; a damaged record is reported and skipped."""
    try:
        ids = sorted(client.get_children(paths.supervisors))
    except NoNodeError:
        return []
    found: list[records.SupervisorInfo] = []
    for sid in ids:
        try:
            data, _ = client.get(paths.supervisor(sid))
            found.append(records.SupervisorInfo.FromString(data))
        except NoNodeError:
            continue  # gone while we listed
        except DecodeError:
            log.warning("skipping damaged record %s", paths.supervisor(sid))
    return found


def describe(client: KazooClient, paths: Paths, name: str) -> pb.TopologyDetail:
    check_name(name)
    try:
        topology_id = client.get(paths.name(name))[0].decode()
        base = records.StormBase.FromString(client.get(paths.storm(topology_id))[0])
    except NoNodeError as e:
        raise ApiError(grpc.StatusCode.NOT_FOUND, f"no live topology named {name!r}") from e
    except (DecodeError, UnicodeDecodeError) as e:
        raise ApiError(grpc.StatusCode.DATA_LOSS, f"the record of {name!r} is damaged") from e
    beats = _worker_beats(client, paths, topology_id)
    errors = recent_errors(client, paths, topology_id)
    live = live_replicas(client, paths)
    detail = pb.TopologyDetail(
        summary=_summary(client, paths, topology_id, base, live, beats, errors),
        component_parallelism=dict(base.component_parallelism),
        config_json=base.config_json,
        components_json=base.components_json,
    )
    assignment = _read(client, paths.assignment(topology_id), records.Assignment)
    if assignment is not None:
        detail.assignment.CopyFrom(assignment)
        now_ms = int(time.time() * 1000)
        for slot in assignment.slots:
            beat = beats.get(worker_name(slot.supervisor_id, slot.slot))
            detail.workers.append(
                pb.WorkerStatus(
                    supervisor_id=slot.supervisor_id,
                    slot=slot.slot,
                    host=slot.host,
                    state=beat.status if beat else "no heartbeat",
                    heartbeat_age_s=(now_ms - beat.time_ms) / 1000.0 if beat else -1.0,
                    last_error=beat.last_error if beat else "",
                    failures_in_a_row=beat.failures_in_a_row if beat else 0,
                    restarts=beat.restarts if beat else 0,
                    log_path=beat.log_path if beat else "",
                    components=beat.components if beat else [],
                    rows_processed=beat.rows_processed if beat else 0,
                    rows_per_s=beat.rows_per_s if beat else 0.0,
                    partitioning_note=beat.partitioning_note if beat else "",
                )
            )
    detail.errors.extend(errors)
    return detail


M = TypeVar("M", records.Assignment, records.WorkerHeartbeat, records.ErrorInfo)


def _read(client: KazooClient, path: str, kind: type[M]) -> M | None:
    try:
        return kind.FromString(client.get(path)[0])
    except (NoNodeError, DecodeError):
        return None


def _read_all(client: KazooClient, wanted: dict[str, str], kind: type[M]) -> dict[str, M | None]:
    """``_read`` of many paths, sent together: one round trip, not one each (a ZooKeeper
    whose disk is slow holds every read for an fsync or two)."""
    sent = {key: client.get_async(path) for key, path in wanted.items()}
    found: dict[str, M | None] = {}
    for key, result in sent.items():
        try:
            found[key] = kind.FromString(result.get()[0])
        except (NoNodeError, DecodeError):
            found[key] = None
    return found


def recent_errors(
    client: KazooClient, paths: Paths, topology_id: str, limit: int = 10
) -> list[records.ErrorInfo]:
    """The newest errors of every component, newest first."""
    found: list[records.ErrorInfo] = []
    try:
        components = client.get_children(paths.errors_of(topology_id))
    except NoNodeError:
        return []
    listings = {
        c: client.get_children_async(paths.component_errors(topology_id, c)) for c in components
    }
    wanted: dict[str, str] = {}
    for component, listing in listings.items():
        try:
            names = listing.get()
        except NoNodeError:
            continue
        for name in names:
            wanted[f"{component}/{name}"] = paths.component_error(topology_id, component, name)
    found.extend(e for e in _read_all(client, wanted, records.ErrorInfo).values() if e is not None)
    found.sort(key=lambda e: e.time_ms, reverse=True)
    return found[:limit]
