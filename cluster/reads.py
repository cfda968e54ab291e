"""Reads of the ZooKeeper state code distribution cares about (never writes)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths

log = logging.getLogger(__name__)


def children_of(client: KazooClient, path: str) -> list[str]:
    """The children of ``path``, read now; none where ``path`` does not exist."""
    try:
        return list(client.get_children(path))
    except NoNodeError:
        return []


def read_storms(client: KazooClient, paths: Paths) -> dict[str, records.StormBase]:
    """Every topology in ``/storms``; a damaged record is reported and skipped."""
    return {tid: base for tid, (base, _) in read_storms_versioned(client, paths).items()}


def read_storms_versioned(
    client: KazooClient, paths: Paths
) -> dict[str, tuple[records.StormBase, int]]:
    """``read_storms`` with each record's znode version (the shape of the record cache's
    ``versioned_items``)."""
    storms: dict[str, tuple[records.StormBase, int]] = {}
    # Sent together, answered together: one round trip for all, not one each (a slow
    # ZooKeeper holds every read for an fsync or two).
    reads = [(tid, client.get_async(paths.storm(tid))) for tid in children_of(client, paths.storms)]
    for topology_id, read in reads:
        try:
            data, stat = read.get()
            storms[topology_id] = (records.StormBase.FromString(data), int(stat.version))
        except NoNodeError:
            continue
        except DecodeError:
            log.warning("skipping damaged record %s", paths.storm(topology_id))
    return storms


def storm_readable(client: KazooClient, paths: Paths, topology_id: str) -> bool:
    """True when ``/storms/<id>`` holds a record that decodes, read now.

    For a view that lacks a topology: absent or damaged means gone (every reader skips a
    damaged record), readable means the view missed it (a read lost to a disconnect).
    """
    try:
        data, _ = client.get(paths.storm(topology_id))
    except NoNodeError:
        return False
    try:
        records.StormBase.FromString(data)
    except DecodeError:
        return False
    return True


@dataclass(frozen=True)
class Holders:
    """Who holds a topology's code, as registered under ``/code-distributor/<id>``."""

    digest: str  # from the holders' nodes ("" when nobody is registered)
    replicas: tuple[str, ...]


def live_replicas(client: KazooClient, paths: Paths) -> frozenset[str]:
    """Replicas with a live session (``/nimbuses``): holder nodes are persistent, so a
    replica that is down still has them; only live ones can serve a download."""
    return frozenset(children_of(client, paths.nimbuses))


def read_holders_of(
    client: KazooClient, paths: Paths, topology_id: str, live: frozenset[str] | None = None
) -> Holders:
    """``live`` (from ``live_replicas``) keeps only replicas that are up; None keeps all."""
    try:
        replicas = sorted(client.get_children(paths.code_holders(topology_id)))
    except NoNodeError:
        return Holders("", ())
    if live is not None:
        replicas = [r for r in replicas if r in live]
    digest = ""
    for replica in replicas:
        try:
            data, _ = client.get(paths.code_holder(topology_id, replica))
        except NoNodeError:
            continue
        digest = data.decode("ascii", errors="replace")
        break
    return Holders(digest, tuple(replicas))
