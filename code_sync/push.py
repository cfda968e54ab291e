"""Code pushed by the leader (``PushCode``): the receiving side, and the sending call.

A submit waits until ``min_replicas`` replicas hold the package; the followers normally
pull it (``DownloadCode``) from the leader. When they cannot reach the leader's port (a
NetworkPolicy or an iptables rule refusing the other replicas, while clients still reach
it), the leader's own outbound connections to them are still open: the leader sends the
package (``code_sync.pusher``) and the follower takes it here, exactly as a download:

- only a package the cluster state names: ``/code-distributor/<id>`` has a holder node
  whose data is this digest (the leader registered it before waiting), or ``/storms/<id>``
  says so; anything else is refused before a byte of it is read;
- the same store and limits: ``CodeStore.write`` with the expected digest and size stops
  at ``max_package_bytes`` and keeps nothing that does not hash to the digest;
- the same registration: this replica writes its own ``/code-distributor/<id>/<self>``
  (``Membership.hold``), nothing else, and asks its syncer for a pass.

Errors are the code store's (``PackageRejected``: the push itself is malformed;
``StoreError``: our disk) plus ``PushUnverifiable`` and ``PushBusy``; the API edge maps
them to gRPC statuses.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator

import grpc
from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import pb, records, rpc
from cluster.factory import make_channel
from cluster.paths import Paths
from code_sync.errors import PackageRejected, PushBusy, PushUnverifiable
from code_sync.package import size_over_limit
from code_sync.store import CodeStore, require_digest
from fencing import Membership

log = logging.getLogger(__name__)

#: Pushed packages a replica receives at once; beyond that it answers busy (the leader
#: tries again), so pushes cannot take every gRPC worker thread of a replica.
MAX_CONCURRENT_PUSHES = 4
#: A topology id is a ZooKeeper node name: ``<name>-<counter>-<seconds>``.
TOPOLOGY_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,200}")
PUSH_CHUNK = 1024 * 1024


def _malformed(message: str) -> PackageRejected:
    return PackageRejected(f"PushCode: {message}")


class PushReceiver:
    """Takes packages pushed by the leader; thread-safe (one call per gRPC thread)."""

    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        store: CodeStore,
        *,
        on_stored: Callable[[], None] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._client = client
        self._paths = paths
        self._id = replica_id
        self._store = store
        self._membership = Membership(client, replica_id, timeout=timeout)
        self._on_stored = on_stored
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT_PUSHES)

    def accept(self, requests: Iterator[pb.PushCodeRequest]) -> pb.PushCodeResponse:
        """Check the header, take the bytes, store, register; the reply says what it did."""
        header = self._header(requests)
        topology_id, digest = header.topology_id, header.digest
        self._verify(topology_id, digest)
        if not self._slots.acquire(blocking=False):
            raise PushBusy(
                f"{self._id} is receiving {MAX_CONCURRENT_PUSHES} pushed packages already; "
                "try again shortly"
            )
        try:
            held = self._store.has(digest)
            if not held:
                # The digest names a package the leader validated at submit, as for a
                # download: matching SHA-256 means the same bytes.
                self._store.write(
                    _chunks(requests),
                    expected_digest=digest,
                    expected_size=header.size,
                    validate=False,
                )
        finally:
            self._slots.release()
        self._membership.hold(self._paths.code_holder(topology_id, self._id), digest.encode())
        log.info(
            "%s %s (%s) pushed by a peer; registered as its holder",
            "already held" if held else "stored",
            topology_id,
            digest[:12],
        )
        if self._on_stored is not None:
            self._on_stored()
        return pb.PushCodeResponse(replica=self._id, already_held=held)

    def _header(self, requests: Iterator[pb.PushCodeRequest]) -> pb.PushCodeHeader:
        first = next(requests, None)
        if first is None or first.WhichOneof("item") != "header":
            raise _malformed("the first message must be the header")
        header = first.header
        if not TOPOLOGY_ID_RE.fullmatch(header.topology_id) or header.topology_id in (".", ".."):
            raise _malformed(
                f"invalid topology id {header.topology_id[:80]!r}: "
                "use 1-200 of A-Z a-z 0-9 . _ - (not '.' or '..')"
            )
        require_digest(header.digest)  # InvalidDigest is a PackageRejected that names it
        limit = self._store.max_package_bytes
        if header.size <= 0:
            raise _malformed(f"package size must be > 0 bytes, got {header.size}")
        if header.size > limit:
            raise _malformed(size_over_limit(header.size, limit))
        return header

    def _verify(self, topology_id: str, digest: str) -> None:
        """The cluster state names ``digest`` as the code of ``topology_id``, read now.

        ``sync`` first: the leader registered its holder node before pushing, and our
        ZooKeeper server may not have applied that write yet.
        """
        folder = self._paths.code_holders(topology_id)
        self._client.sync(folder)
        named = set()
        try:
            data, _ = self._client.get(self._paths.storm(topology_id))
            named.add(records.StormBase.FromString(data).digest)
        except NoNodeError:
            pass
        except DecodeError:
            log.warning("skipping damaged record %s", self._paths.storm(topology_id))
        try:
            holders = self._client.get_children(folder)
        except NoNodeError:
            holders = []
        for holder in holders:
            try:
                data, _ = self._client.get(self._paths.code_holder(topology_id, holder))
                named.add(data.decode())
            except (NoNodeError, UnicodeDecodeError):
                continue
        if digest not in named:
            said = ", ".join(sorted(d[:12] for d in named if d)) or "nothing"
            raise PushUnverifiable(
                f"cannot verify package {digest} for topology {topology_id!r}: the cluster "
                f"state names {said} as its code (no holder registered this digest)"
            )


def _chunks(requests: Iterable[pb.PushCodeRequest]) -> Iterator[bytes]:
    for request in requests:
        kind = request.WhichOneof("item")
        if kind == "chunk":
            yield request.chunk
        elif kind == "header":
            raise _malformed("only the first message may be a header")
        else:
            raise _malformed("a message with neither a header nor a chunk")


def push_requests(
    header: pb.PushCodeHeader, chunks: Iterable[bytes]
) -> Iterator[pb.PushCodeRequest]:
    """The stream a ``PushCode`` call sends: the header, then the chunks."""
    yield pb.PushCodeRequest(header=header)
    for chunk in chunks:
        yield pb.PushCodeRequest(chunk=chunk)


def start_push(
    address: str, header: pb.PushCodeHeader, chunks: Iterable[bytes], *, timeout: float
) -> tuple[grpc.Future[pb.PushCodeResponse], grpc.Channel]:
    """Start sending a package to ``address``; the call's future and its channel (the
    caller closes it when the call is done). TLS and the token are the replica's own, as
    for its downloads (``cluster.factory.make_channel``)."""
    channel = make_channel(address, bulk=True)  # pings may wait behind the stream's DATA
    try:
        future = rpc.NimbusStub(channel).PushCode.future(
            push_requests(header, chunks), timeout=timeout
        )
    except BaseException:
        channel.close()
        raise
    return future, channel
