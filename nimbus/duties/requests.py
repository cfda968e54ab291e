"""Idempotent mutating calls: the first outcome of a client request id, kept in ZooKeeper.

Every successful mutation creates ``/requests/<client-request-id>`` in the *same* fenced
multi-op that changes the topology, so "done" and "remembered" cannot come apart: a
retry after a failover (the client did not see the answer) finds the record and gets
the first outcome, and the work is done once. Failed calls change nothing and are not
remembered; retrying them is safe.

A record is read from the replica's own ZooKeeper server, which may show one the quorum
lacks, or one the quorum will lose (ZOOKEEPER-4837/-5010 class). So a recalled record is
an answer only once a multi-op of ours commits it again (``nimbus.duties.confirm``): an
acknowledgement rests on a transaction of the service's own, never on a read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from cluster.api import records
from cluster.names import check_request_id
from cluster.paths import Paths
from fencing import Create

log = logging.getLogger(__name__)


#: Told why, when this replica's ZooKeeper server shows what its quorum lacks (the
#: daemon moves to another server: ``cluster.server_move.ServerMover.move``).
OnDivergentServer = Callable[[str], object]


def remember(
    paths: Paths,
    request_id: str,
    *,
    method: str,
    topology_id: str,
    epoch: int,
    handover_to: str = "",
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
        handover_to=handover_to,
    )
    return [Create(paths.request(request_id), outcome.SerializeToString(deterministic=True))]
