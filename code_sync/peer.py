"""Fetching a package from a peer replica over ``DownloadCode`` (server streaming)."""

from __future__ import annotations

from collections.abc import Iterator

from cluster.api import pb, rpc
from cluster.factory import make_channel


def fetch_from_peer(address: str, digest: str, *, timeout: float) -> Iterator[bytes]:
    """Yield the package's bytes as the peer streams them; the caller verifies the digest."""
    channel = make_channel(address, bulk=True)  # pings may wait behind the stream's DATA
    try:
        stream = rpc.NimbusStub(channel).DownloadCode(
            pb.DownloadCodeRequest(digest=digest), timeout=timeout
        )
        for chunk in stream:
            yield chunk.data
    finally:
        channel.close()
