"""Leader-only: remove per-topology trees whose topology is gone from ``/storms``.

The lifecycle removes a killed topology's trees right after its record; a removal that
failed then (a conflict, a lost connection), a commit folder made after it, or a submit
abandoned with an unknown outcome would otherwise stay for ever. Each pass here lists the
per-topology folders and removes, fenced, every tree whose topology has no record in
ZooKeeper itself (never judged from a cache that may have missed a record).

A second record from one submit request (``resurrected_attempts``): the request's record
names another topology, the one acknowledged. ZooKeeper 3.9.5 made such a record appear:
a submit's first attempt, logged by a ZooKeeper leader cut one way from its peers and
never committed (the client saw its outcome unknown and retried), came back in a
snapshot that server took while leading again, and spread to the quorum with it
(ZOOKEEPER-1549 class). The retry had been acknowledged as another topology; the
resurrected one was never acknowledged, so it is removed (its trees follow as orphans).

A submission's ``/code-distributor`` folder exists before its record: the leader and the
followers register as holders while the submit waits for its copies. Such a folder is
only an orphan once it is older than ``IN_FLIGHT_GRACE_MS`` (by ZooKeeper's ctime), far
longer than a submit can wait; sweeping it sooner failed the submit in flight.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths
from fencing import Check, Delete, FencedWriter, Op, SetData, WriteConflictError

log = logging.getLogger(__name__)

#: A code-distributor folder without a record is left alone this long after its creation.
IN_FLIGHT_GRACE_MS = 10 * 60 * 1000


def orphan_trees(
    client: KazooClient,
    paths: Paths,
    *,
    now_ms: int | None = None,
    grace_ms: int = IN_FLIGHT_GRACE_MS,
) -> list[str]:
    """Per-topology trees under the layout's folders with no ``/storms`` record (a code
    folder only once older than ``grace_ms``: it may be a submission in flight)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    folders = {
        paths.assignments: paths.assignment,
        paths.workerbeats: paths.workerbeats_of,
        paths.errors: paths.errors_of,
        paths.code_distributor: paths.code_holders,
        paths.claims: paths.claims_of,
        paths.commits: paths.commits_of,
    }
    found: list[str] = []
    live: dict[str, bool] = {}
    for folder, tree_of in folders.items():
        try:
            ids = client.get_children(folder)
        except NoNodeError:
            continue
        for topology_id in sorted(ids):
            if topology_id not in live:
                live[topology_id] = client.exists(paths.storm(topology_id)) is not None
            if live[topology_id]:
                continue
            tree = tree_of(topology_id)
            if folder == paths.code_distributor:
                stat = client.exists(tree)
                if stat is None or now - int(stat.ctime) < grace_ms:
                    continue
            found.append(tree)
    return found


def resurrected_attempts(
    client: KazooClient, paths: Paths, storms: Mapping[str, records.StormBase]
) -> list[tuple[str, str]]:
    """(topology id, the id its request acknowledged) of every record whose submit
    request's record names another live topology of the same name. Candidates come from
    ``storms`` (the cached records: two of one name and request id); the request's
    record is read from ZooKeeper."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for topology_id, base in storms.items():
        if base.client_request_id:
            groups[(base.name, base.client_request_id)].append(topology_id)
    found: list[tuple[str, str]] = []
    for (_, request_id), ids in sorted(groups.items()):
        if len(ids) < 2:
            continue
        try:
            outcome = records.RequestOutcome.FromString(client.get(paths.request(request_id))[0])
        except (NoNodeError, DecodeError):
            continue  # pruned or damaged: no proof of which was acknowledged; leave them
        if outcome.method == "SubmitTopology" and outcome.topology_id in ids:
            found += [(tid, outcome.topology_id) for tid in ids if tid != outcome.topology_id]
    return found


def _remove_resurrected(
    client: KazooClient, paths: Paths, writer: FencedWriter, topology_id: str, acked: str
) -> None:
    """Delete the record, fenced on the request's record (the proof, at the quorum) and,
    when the name points at it, point the name at the acknowledged topology."""
    data, stat = client.get(paths.storm(topology_id))
    base = records.StormBase.FromString(data)
    ops: list[Op] = [
        Check(paths.request(base.client_request_id)),
        Check(paths.storm(acked)),
        Delete(paths.storm(topology_id), int(stat.version)),
    ]
    try:
        named, name_stat = client.get(paths.name(base.name))
    except NoNodeError:
        named, name_stat = b"", None
    if name_stat is not None and named.decode("ascii", "replace") == topology_id:
        ops.append(SetData(paths.name(base.name), acked.encode(), int(name_stat.version)))
    writer.batch(ops)


def sweep(
    client: KazooClient,
    paths: Paths,
    writer: FencedWriter,
    *,
    now_ms: int | None = None,
    storms: Mapping[str, records.StormBase] | None = None,
) -> list[str]:
    """Remove every orphan tree, and every resurrected attempt among ``storms``; returns
    what was removed, in words."""
    removed: list[str] = []
    for topology_id, acked in resurrected_attempts(client, paths, storms or {}):
        try:
            _remove_resurrected(client, paths, writer, topology_id, acked)
        except (WriteConflictError, NoNodeError, DecodeError) as e:
            log.info("could not remove resurrected %s yet: %s", topology_id, e)
            continue
        log.warning(
            "removed %s: a submit attempt never acknowledged (its request was answered "
            "with %s) that ZooKeeper brought back after a partition",
            topology_id,
            acked,
        )
        removed.append(f"resurrected attempt {topology_id} removed ({acked} kept)")
    for tree in orphan_trees(client, paths, now_ms=now_ms):
        try:
            writer.delete_recursive(tree)
        except WriteConflictError as e:
            log.info("could not remove orphan %s yet: %s", tree, e)
            continue
        removed.append(f"orphan {tree} removed")
    return removed
