"""A retried request is answered only from a transaction of the leader's own.

ZooKeeper can show a node that its quorum never committed and later lose it (a "ghost":
ZOOKEEPER-4837; ``docs/zookeeper-divergence.md``). A request record ``/requests/<id>``
read on our server, and even the ZooKeeper leader's answer to a check on it, may be such a
ghost: the first attempt's transaction reached one server, the client saw no answer, and
its retry found the record. Answering the retry from that read would acknowledge an
outcome that may vanish.

So a found record is an answer only after one fenced multi-op commits, with the quorum,
what the reply promises:

- a check of the record at the version read (or of the confirmation, when only it is left);
- ``/confirmed/<id>`` *created* with the same outcome (deleted and created again when our
  server shows one: a create lands on every server that replays the log, a ``setData`` on
  a ghost node lands nowhere but on the servers that have it);
- the first attempt's own writes that are still the last ones (their ``mzxid`` is the
  record's ``czxid``, the first transaction) committed again: a node it created is deleted
  and created again, a node it set is set again at its version. A later write supersedes
  them and is left alone: it was a transaction of its own.

If the record later vanishes, the confirmation, the outcome and the retry's answer stay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from cluster.api import records
from cluster.names import check_request_id
from cluster.paths import Paths
from cluster.server_move import current_server
from fencing import (
    Check,
    ConflictReason,
    Create,
    Delete,
    FencedWriter,
    Op,
    SetData,
    WriteConflictError,
)
from fencing.writer import stamp_epoch
from nimbus.duties.requests import OnDivergentServer

log = logging.getLogger(__name__)

#: Conflicts (our server behind the quorum, a concurrent retry) before giving up; each
#: is followed by a sync of the path that conflicted.
ATTEMPTS = 5


class UnconfirmedError(Exception):
    """Every attempt to confirm a found outcome conflicted: nothing was answered; a retry
    with the same request id is safe."""


@dataclass(frozen=True)
class _Node:
    path: str
    data: bytes
    stat: ZnodeStat


def _read(client: KazooClient, paths: Iterable[str]) -> dict[str, _Node]:
    """The nodes that exist among ``paths``; the reads go out together."""
    sent = [(path, client.get_async(path)) for path in paths]
    found: dict[str, _Node] = {}
    for path, result in sent:
        try:
            data, stat = result.get()
        except NoNodeError:
            continue
        found[path] = _Node(path, data, stat)
    return found


def _outcome(node: _Node | None) -> records.RequestOutcome | None:
    if node is None:
        return None
    try:
        return records.RequestOutcome.FromString(node.data)
    except DecodeError:
        return None


def recommit(node: _Node, zxids: set[int], data: bytes | None = None) -> list[Op]:
    """Ops that write ``node`` again (``data``, or its own) in a new transaction when its
    last write was one of ``zxids`` (the first attempt's, or an earlier confirmation's);
    none otherwise."""
    if int(node.stat.mzxid) not in zxids:
        return []
    data = node.data if data is None else data
    if int(node.stat.czxid) in zxids:  # created there: a create lands everywhere
        return [Delete(node.path, int(node.stat.version)), Create(node.path, data)]
    return [SetData(node.path, data, int(node.stat.version))]


def restamped(paths: Paths, node: _Node, epoch: int) -> bytes:
    """``node``'s data as written again by the term of ``epoch``: a topology's record says
    which term wrote it (the soak's S1 check found the first attempt's epoch written in a
    later term); other nodes (a name's topology id) as they are."""
    if node.path.rpartition("/")[0] != paths.storms:
        return node.data
    try:
        record = records.StormBase.FromString(node.data)
    except DecodeError:
        return node.data
    stamp_epoch(record, epoch)
    return record.SerializeToString(deterministic=True)


def recall_committed(
    client: KazooClient,
    paths: Paths,
    writer: FencedWriter,
    request_id: str,
    *,
    effects: Callable[[records.RequestOutcome], Iterable[str]] = lambda _outcome: (),
    on_divergent: OnDivergentServer | None = None,
) -> records.RequestOutcome | None:
    """The first outcome of ``request_id``, once a multi-op of ours has committed it
    (module docstring); None when there is none and the caller does the work. ``effects``:
    the paths the first attempt may have written, from its outcome (its topology's). A record our
    server shows and the quorum lacks, with no confirmation, is no outcome: logged,
    ``on_divergent`` told, None. Raises ``UnconfirmedError`` after ``ATTEMPTS``
    conflicts, and what ``FencedWriter.batch`` raises."""
    if not check_request_id(request_id):
        return None
    record_path, confirmation_path = paths.request(request_id), paths.confirmation(request_id)
    for _ in range(ATTEMPTS):
        found = _read(client, [record_path, confirmation_path])
        record, confirmation = found.get(record_path), found.get(confirmation_path)
        outcome = _outcome(record) or _outcome(confirmation)
        if outcome is None:
            return None
        effect_paths = list(effects(outcome))
        found.update(_read(client, effect_paths))
        answer = outcome.SerializeToString(deterministic=True)
        zxids = {int(n.stat.czxid) for n in (record, confirmation) if n is not None}
        ops: list[Op] = []
        if record is not None:
            ops.append(Check(record_path, int(record.stat.version)))
        if confirmation is not None:
            ops.append(Delete(confirmation_path, int(confirmation.stat.version)))
        ops.append(Create(confirmation_path, answer))
        for path in effect_paths:
            if path in found:
                node = found[path]
                ops += recommit(node, zxids, restamped(paths, node, writer.token.epoch))
        try:
            writer.batch(ops)
        except WriteConflictError as e:
            if e.path == record_path and e.reason is ConflictReason.NO_NODE and not confirmation:
                why = f"request record {request_id} shown, the quorum lacks it"
                server = current_server(client)
                log.warning("ZooKeeper server %s: %s; not answering from it", server, why)
                if on_divergent is not None:
                    on_divergent(why)
                return None
            client.sync(e.path)  # our server is behind on that path: catch up, look again
            continue
        return outcome
    raise UnconfirmedError(
        f"the outcome of request {request_id} kept changing under this leader's reads "
        f"({ATTEMPTS} attempts, nothing answered); retry with the same request id"
    )
