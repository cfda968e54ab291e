"""Idempotent mutating calls: the first outcome of a client request id, kept in ZooKeeper.

Every successful mutation creates ``/requests/<client-request-id>`` in the *same* fenced
multi-op that changes the topology, so "done" and "remembered" cannot come apart: a
retry after a failover (the client did not see the answer) finds the record and gets
the first outcome, and the work is done once. Failed calls change nothing and are not
remembered; retrying them is safe.
"""

from __future__ import annotations

import time

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.names import check_request_id
from cluster.paths import Paths
from fencing import Create


def recall(client: KazooClient, paths: Paths, request_id: str) -> records.RequestOutcome | None:
    if not check_request_id(request_id):
        return None
    try:
        data, _ = client.get(paths.request(request_id))
    except NoNodeError:
        return None
    try:
        return records.RequestOutcome.FromString(data)
    except DecodeError:
        return None


def remember(
    paths: Paths, request_id: str, *, method: str, topology_id: str, epoch: int
) -> list[Create]:
    """The op to add to the mutation's multi-op (none when no request id was given)."""
    if not check_request_id(request_id):
        return []
    outcome = records.RequestOutcome(
        request_id=request_id,
        method=method,
        grpc_code=0,
        topology_id=topology_id,
        epoch=epoch,
        time_ms=int(time.time() * 1000),
    )
    return [Create(paths.request(request_id), outcome.SerializeToString(deterministic=True))]
