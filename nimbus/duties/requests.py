"""Idempotent mutating calls: the first outcome of a client request id, kept in ZooKeeper.

Every successful mutation creates ``/requests/<client-request-id>`` in the *same* fenced
multi-op that changes the topology, so "done" and "remembered" cannot come apart: a
retry after a failover (the client did not see the answer) finds the record and gets
the first outcome, and the work is done once. Failed calls change nothing and are not
remembered; retrying them is safe.

A record is read from the replica's own ZooKeeper server, which may show one the quorum
lacks (a server that came back from a partition with a dirty tree, ZOOKEEPER-4837/-5010
class). So a recalled record is an answer only once a fenced check at the quorum finds it
too (``recall_confirmed``): an acknowledgement rests on the quorum, never on one server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.names import check_request_id
from cluster.paths import Paths
from cluster.server_move import current_server
from fencing import Check, ConflictReason, Create, FencedWriter, WriteConflictError

log = logging.getLogger(__name__)


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


#: Told why, when this replica's ZooKeeper server shows what its quorum lacks (the
#: daemon moves to another server: ``cluster.server_move.ServerMover.move``).
OnDivergentServer = Callable[[str], object]


def recall_confirmed(
    client: KazooClient,
    paths: Paths,
    writer: FencedWriter,
    request_id: str,
    on_divergent: OnDivergentServer | None = None,
) -> records.RequestOutcome | None:
    """``recall``, then the record's existence proved at the quorum by a fenced check (one
    multi-op the ZooKeeper leader answers). A record this server shows and the quorum
    lacks is no outcome: logged with the server, ``on_divergent`` told, and the caller
    does the work itself. Raises what ``FencedWriter.batch`` raises
    (``WriteOutcomeUnknown`` when the quorum cannot be asked), never answering from the
    local read alone."""
    outcome = recall(client, paths, request_id)
    if outcome is None:
        return None
    try:
        writer.batch([Check(paths.request(request_id))])
    except WriteConflictError as e:
        if e.reason != ConflictReason.NO_NODE:
            raise
        why = f"request record {request_id} shown, the quorum lacks it"
        log.warning("ZooKeeper server %s: %s; not answering from it", current_server(client), why)
        if on_divergent is not None:
            on_divergent(why)
        return None
    return outcome


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
