"""Leader-only: remove per-topology trees whose topology is gone from ``/storms``.

The lifecycle removes a killed topology's trees right after its record; a removal that
failed then (a conflict, a lost connection), a commit folder made after it, or a submit
abandoned with an unknown outcome would otherwise stay for ever. Each pass here lists the
per-topology folders and removes, fenced, every tree whose topology has no record in
ZooKeeper itself (never judged from a cache that may have missed a record).
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.paths import Paths
from fencing import FencedWriter, WriteConflictError

log = logging.getLogger(__name__)


def orphan_trees(client: KazooClient, paths: Paths) -> list[str]:
    """Per-topology trees under the layout's folders with no ``/storms`` record."""
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
            if not live[topology_id]:
                found.append(tree_of(topology_id))
    return found


def sweep(client: KazooClient, paths: Paths, writer: FencedWriter) -> list[str]:
    """Remove every orphan tree; returns what was removed, in words."""
    removed: list[str] = []
    for tree in orphan_trees(client, paths):
        try:
            writer.delete_recursive(tree)
        except WriteConflictError as e:
            log.info("could not remove orphan %s yet: %s", tree, e)
            continue
        removed.append(f"orphan {tree} removed")
    return removed
