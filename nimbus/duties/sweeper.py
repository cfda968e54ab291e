"""Leader-only: remove per-topology trees whose topology is gone from ``/storms``.

The lifecycle removes a killed topology's trees right after its record; a removal that
failed then (a conflict, a lost connection), a commit folder made after it, or a submit
abandoned with an unknown outcome would otherwise stay for ever. Each pass here lists the
per-topology folders and removes, fenced, every tree whose topology has no record in
ZooKeeper itself (never judged from a cache that may have missed a record).

A submission's ``/code-distributor`` folder exists before its record: the leader and the
followers register as holders while the submit waits for its copies. Such a folder is
only an orphan once it is older than ``IN_FLIGHT_GRACE_MS`` (by ZooKeeper's ctime), far
longer than a submit can wait; sweeping it sooner failed the submit in flight.
"""

from __future__ import annotations

import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.paths import Paths
from fencing import FencedWriter, WriteConflictError

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


def sweep(
    client: KazooClient, paths: Paths, writer: FencedWriter, *, now_ms: int | None = None
) -> list[str]:
    """Remove every orphan tree; returns what was removed, in words."""
    removed: list[str] = []
    for tree in orphan_trees(client, paths, now_ms=now_ms):
        try:
            writer.delete_recursive(tree)
        except WriteConflictError as e:
            log.info("could not remove orphan %s yet: %s", tree, e)
            continue
        removed.append(f"orphan {tree} removed")
    return removed
