"""A topology's error log: ``/errors/<topology-id>/<component>/e<seq>``, newest kept.

Leader-only state like the rest: each error is created (with its folders) in one fenced
multi-op stamped with the leader's epoch, and the oldest beyond ``keep`` are deleted in
another, as Storm keeps the last few errors of each component.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths
from fencing.ops import Create, Delete, Op
from fencing.writer import FencedWriter, stamp_epoch

ERRORS_KEPT = 10


def append_error(
    client: KazooClient,
    paths: Paths,
    writer: FencedWriter,
    topology_id: str,
    error: records.ErrorInfo,
    *,
    keep: int = ERRORS_KEPT,
) -> None:
    folder = paths.component_errors(topology_id, error.component)
    ops: list[Op] = [
        Create(path)
        for path in (paths.errors_of(topology_id), folder)
        if client.exists(path) is None
    ]
    stamp_epoch(error, writer.token.epoch)
    ops.append(
        Create(
            paths.component_error(topology_id, error.component, "e"),
            error.SerializeToString(deterministic=True),
            sequence=True,
        )
    )
    writer.batch(ops)
    old = sorted(client.get_children(folder))[:-keep]
    if old:
        writer.batch([Delete(paths.component_error(topology_id, error.component, n)) for n in old])


def newest_error(
    client: KazooClient, paths: Paths, topology_id: str, component: str
) -> records.ErrorInfo | None:
    """The component's most recent error, if any."""
    try:
        names = sorted(client.get_children(paths.component_errors(topology_id, component)))
        if not names:
            return None
        data, _ = client.get(paths.component_error(topology_id, component, names[-1]))
    except NoNodeError:
        return None
    return records.ErrorInfo.FromString(data)
