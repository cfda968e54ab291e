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

Every removal commits only with its evidence proved at the quorum, in its own multi-op:
a server may show a node its quorum lacks, or lack one the quorum has (ZOOKEEPER-4837).
An orphan's removal proves its topology's record absent (``proof_of_absence``); a
resurrected attempt's removal checks the request's record at the version read, the
acknowledged topology's record, and the name node as read (its version, or its absence).
A removal the quorum refutes is logged, its path synced, and left to the next sweep.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from cluster.api import records
from cluster.paths import Paths
from cluster.server_move import current_server
from fencing import Check, Delete, FencedWriter, Op, SetData, WriteConflictError
from nimbus.duties.planning import disproved, proof_of_absence

log = logging.getLogger(__name__)

#: A code-distributor folder without a record is left alone this long after its creation.
IN_FLIGHT_GRACE_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class Orphan:
    """A per-topology tree whose topology had no ``/storms`` record on our server."""

    topology_id: str
    tree: str


def orphans(
    client: KazooClient,
    paths: Paths,
    *,
    now_ms: int | None = None,
    grace_ms: int = IN_FLIGHT_GRACE_MS,
) -> list[Orphan]:
    """Per-topology trees under the layout's folders with no ``/storms`` record on our
    server (a code folder only once older than ``grace_ms``: it may be a submission in
    flight). Read from one server: ``sweep`` proves each record's absence at the quorum."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    folders = {
        paths.assignments: paths.assignment,
        paths.workerbeats: paths.workerbeats_of,
        paths.errors: paths.errors_of,
        paths.code_distributor: paths.code_holders,
        paths.claims: paths.claims_of,
        paths.commits: paths.commits_of,
    }
    found: list[Orphan] = []
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
            found.append(Orphan(topology_id, tree))
    return found


def orphan_trees(
    client: KazooClient,
    paths: Paths,
    *,
    now_ms: int | None = None,
    grace_ms: int = IN_FLIGHT_GRACE_MS,
) -> list[str]:
    """The trees of ``orphans``."""
    return [o.tree for o in orphans(client, paths, now_ms=now_ms, grace_ms=grace_ms)]


def tree_deletes(client: KazooClient, path: str) -> list[Op]:
    """Deletes of ``path`` and everything under it as read now, children first (none when
    ``path`` is gone). A child our server did not list makes its parent's delete fail
    (NotEmpty): the multi-op is refused, nothing is removed."""
    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    ops: list[Op] = []
    for child in sorted(children):
        ops += tree_deletes(client, f"{path.rstrip('/')}/{child}")
    return [*ops, Delete(path)]


@dataclass(frozen=True)
class Resurrected:
    """A record to remove, the topology its request acknowledged, and the request's
    record at the version our server showed it say so."""

    topology_id: str
    acked: str
    request_id: str
    request_version: int


def resurrected(
    client: KazooClient, paths: Paths, storms: Mapping[str, records.StormBase]
) -> list[Resurrected]:
    """Every record whose submit request's record names another live topology of the
    same name. Candidates come from ``storms`` (the cached records: two of one name and
    request id); the request's record is read from ZooKeeper (our server: ``sweep``
    proves it at the quorum)."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for topology_id, base in storms.items():
        if base.client_request_id:
            groups[(base.name, base.client_request_id)].append(topology_id)
    found: list[Resurrected] = []
    for (_, request_id), ids in sorted(groups.items()):
        if len(ids) < 2:
            continue
        try:
            data, stat = client.get(paths.request(request_id))
            outcome = records.RequestOutcome.FromString(data)
        except (NoNodeError, DecodeError):
            continue  # pruned or damaged: no proof of which was acknowledged; leave them
        if outcome.method == "SubmitTopology" and outcome.topology_id in ids:
            acked, version = outcome.topology_id, int(stat.version)
            found += [Resurrected(tid, acked, request_id, version) for tid in ids if tid != acked]
    return found


def resurrected_attempts(
    client: KazooClient, paths: Paths, storms: Mapping[str, records.StormBase]
) -> list[tuple[str, str]]:
    """(topology id, the id its request acknowledged) of each of ``resurrected``."""
    return [(r.topology_id, r.acked) for r in resurrected(client, paths, storms)]


def _remove_resurrected(
    client: KazooClient, paths: Paths, writer: FencedWriter, attempt: Resurrected
) -> None:
    """Delete the record and, when the name points at it, point the name at the
    acknowledged topology: one multi-op that commits only while the quorum has what was
    read. The request's record at the version read (a version is all ZooKeeper compares:
    a record only ever created is proved by ``acked``'s record, which a ghost record's
    topology lacks at the quorum), ``acked``'s record, the attempt's record at its
    version, and the name node as read: its version, or its absence (a name the quorum
    still points at the attempt must not be left naming a removed topology)."""
    data, stat = client.get(paths.storm(attempt.topology_id))
    base = records.StormBase.FromString(data)
    ops: list[Op] = [
        Check(paths.request(attempt.request_id), attempt.request_version),
        Check(paths.storm(attempt.acked)),
        Delete(paths.storm(attempt.topology_id), int(stat.version)),
    ]
    name = paths.name(base.name)
    try:
        named, name_stat = client.get(name)
    except NoNodeError:
        ops += proof_of_absence(name)
    else:
        if named.decode("ascii", "replace") == attempt.topology_id:
            ops.append(SetData(name, attempt.acked.encode(), int(name_stat.version)))
        else:
            ops.append(Check(name, int(name_stat.version)))
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
    what was removed, in words. A removal the quorum refused is logged and its path
    synced; the next sweep reads it again."""
    removed: list[str] = []
    for attempt in resurrected(client, paths, storms or {}):
        topology_id, acked = attempt.topology_id, attempt.acked
        try:
            _remove_resurrected(client, paths, writer, attempt)
        except WriteConflictError as e:
            log.info("could not remove resurrected %s yet: %s", topology_id, e)
            catch_up(client, e.path)
            continue
        except (NoNodeError, DecodeError) as e:
            log.info("could not remove resurrected %s yet: %s", topology_id, e)
            continue
        log.warning(
            "removed %s: a submit attempt never acknowledged (its request was answered "
            "with %s) that ZooKeeper brought back after a partition",
            topology_id,
            acked,
        )
        removed.append(f"resurrected attempt {topology_id} removed ({acked} kept)")
    refuted: set[str] = set()  # topologies whose record the quorum has: one refusal each
    for orphan in orphans(client, paths, now_ms=now_ms):
        if orphan.topology_id in refuted:
            continue
        record = paths.storm(orphan.topology_id)
        deletes = tree_deletes(client, orphan.tree)
        if not deletes:
            continue
        try:
            writer.batch([*proof_of_absence(record), *deletes])
        except WriteConflictError as e:
            if disproved(e, record):
                refuted.add(orphan.topology_id)
                log.warning(
                    "ZooKeeper server %s showed %s gone and the quorum has it: its trees "
                    "stay (the server is behind or diverged)",
                    current_server(client),
                    record,
                )
            else:
                log.info("could not remove orphan %s yet: %s", orphan.tree, e)
            catch_up(client, e.path)
            continue
        removed.append(f"orphan {orphan.tree} removed")
    return removed


def catch_up(client: KazooClient, path: str) -> None:
    """Bring our server up to the quorum on ``path`` after a refused write, before the
    duty's next pass reads it again (a server behind catches up; one that diverged does
    not, and the next pass's multi-op is refused again: once a pass, never in a loop)."""
    try:
        client.sync(path)
    except KazooException as e:
        log.info("sync of %s failed: %s", path, e)
