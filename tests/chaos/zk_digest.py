"""ZooKeeper's own evidence of divergence: ``zk_digest_mismatches_count`` in ``mntr``.

With ``digest.enabled`` (on by default) a server counts each transaction whose tree digest
differs from the one its leader logged: a ghost transaction (ZOOKEEPER-4837,
``docs/zookeeper-divergence.md``). The soak reads every server before and after each
trial; a trial in which a count rose is one in which ZooKeeper itself diverged.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from devtools.zkserver import ZooKeeperCluster

KEY = "zk_digest_mismatches_count"


def parse_mntr(text: str) -> dict[str, str]:
    """``mntr``'s ``key<TAB>value`` lines."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep:
            found[key.strip()] = value.strip()
    return found


def four_letters(address: str, word: bytes = b"mntr", timeout: float = 2.0) -> str:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as link:
        link.sendall(word)
        chunks = []
        while chunk := link.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def mismatches(zk: object) -> dict[int, int | None]:
    """Each server's count (None: unreachable, or a server without the key); empty for
    an ensemble this process did not start."""
    if not isinstance(zk, ZooKeeperCluster):
        return {}
    counts: dict[int, int | None] = {}
    for i in range(zk.size):
        try:
            value = parse_mntr(four_letters(zk.node_connect_string(i))).get(KEY)
        except OSError:
            value = None
        counts[i] = int(value) if value is not None and value.isdigit() else None
    return counts


def rose(before: Mapping[int, int | None], after: Mapping[int, int | None]) -> bool:
    """A server's count grew between the two readings (unknown readings prove nothing)."""
    return any(
        (b := before.get(i)) is not None and a is not None and a > b for i, a in after.items()
    )
