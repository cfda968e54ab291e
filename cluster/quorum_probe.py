"""Does a ZooKeeper server reach its quorum now? Ask it for a new session and see.

A server cut from its peers keeps its clients and answers their reads until syncLimit,
and a server that lags its quorum answers them too: neither tells a client so. A new
session does: the server forwards ``createSession`` to the quorum's leader and answers
the handshake only once the quorum committed it, so a server that cannot reach a quorum
stalls or closes the connection. The probe also sends the zxid the caller has seen, which
a server that lags refuses. The session is closed at once (one more committed request);
no kazoo client is made for it, only the handshake on a socket of its own, through
kazoo's own connection helper so TLS settings are the client's.

The move off a stalled server (``cluster.server_move``) asks this of every other server
before it goes: a stall of the whole ensemble (its leader paused, an election) answers
"no" everywhere, and moving then would only risk the session on a server that cannot
revalidate it.

What it measures: ``createSession`` is a transaction like any write, proposed by the
quorum's leader and logged (fsynced) by a quorum before it is answered, so the time to an
answer is the ensemble's write latency as seen through that server, the same path a beat
takes through ours. Under a uniformly slow disk (every server's fsync slow) a probe takes
as long as a beat: a fixed deadline then answers "reaches its quorum" or not by chance. A
caller comparing servers gives its own deadline (``Probe``'s ``timeout``): one that only a
server clearly faster than its own can meet.
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Close, Connect, int_struct

log = logging.getLogger(__name__)

#: The session the probe asks for (ms); the server clamps it to its minimum. It is closed
#: at once; the value matters only if the close is lost.
PROBE_SESSION_MS = 4000
_CLOSE_XID = 1


class Probe(Protocol):
    def __call__(
        self, servers: list[tuple[str, int]], timeout: float | None = None
    ) -> list[tuple[str, int]]:
        """Those of ``servers`` that open a session within ``timeout`` seconds (None: the
        probe's own deadline)."""
        ...


def reaches_quorum(client: KazooClient, host: str, port: int, timeout: float) -> bool:
    """True when ``host:port`` opens a new session within ``timeout`` seconds for a
    client that has seen ``client``'s last zxid; False on any failure or refusal."""
    deadline = time.monotonic() + timeout
    try:
        sock = _connect(client, host, port, timeout)
    except (OSError, ValueError) as e:
        log.debug("probe of %s:%d: cannot connect: %s", host, port, e)
        return False
    try:
        hello = Connect(0, client.last_zxid or 0, PROBE_SESSION_MS, 0, b"\x00" * 16, False)
        _send(sock, hello.serialize())
        body = _read_frame(sock, deadline)
        answer, _ = Connect.deserialize(body, 0)
        if answer.time_out <= 0 or answer.session_id == 0:
            return False  # refused: it has not seen what we have, or is not serving
        _send(sock, int_struct.pack(_CLOSE_XID) + int_struct.pack(Close.type))
        return True
    except (OSError, ValueError, struct.error) as e:
        log.debug("probe of %s:%d: no session: %s", host, port, e)
        return False
    finally:
        sock.close()


def servers_reaching_quorum(
    client: KazooClient, servers: list[tuple[str, int]], timeout: float
) -> list[tuple[str, int]]:
    """Those of ``servers`` that open a session within ``timeout``, probed at once; it
    returns as soon as one has (with any others answered by then): a server that stalls
    costs the caller nothing once another answered."""
    if not servers:
        return []
    answered: list[tuple[str, int]] = []
    pool = ThreadPoolExecutor(len(servers), thread_name_prefix="quorum-probe")
    try:
        futures = {pool.submit(reaches_quorum, client, h, p, timeout): (h, p) for h, p in servers}
        pending = set(futures)
        while pending and not answered:
            done, pending = wait(pending, return_when="FIRST_COMPLETED")
            answered.extend(futures[f] for f in done if f.result())
    finally:
        pool.shutdown(wait=False)  # a stalled probe ends at its own deadline
    return answered


def _connect(client: KazooClient, host: str, port: int, timeout: float) -> Any:
    return client.handler.create_connection(
        address=(host, port),
        hostname=host,
        timeout=timeout,
        use_ssl=client.use_ssl,
        keyfile=client.keyfile,
        certfile=client.certfile,
        ca=client.ca,
        keyfile_password=client.keyfile_password,
        verify_certs=client.verify_certs,
        check_hostname=client.check_hostname,
    )


def _send(sock: socket.socket, body: bytes | bytearray) -> None:
    sock.sendall(int_struct.pack(len(body)) + bytes(body))


def _read_frame(sock: socket.socket, deadline: float) -> bytes:
    (length,) = int_struct.unpack(_read(sock, 4, deadline))
    if not 0 < length < 1 << 16:
        raise ValueError(f"a handshake of {length} bytes")
    return _read(sock, length, deadline)


def _read(sock: socket.socket, length: int, deadline: float) -> bytes:
    parts: list[bytes] = []
    remaining = length
    while remaining > 0:
        pending = getattr(sock, "pending", None)  # TLS may hold decrypted bytes already
        if not (pending and pending() > 0):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise TimeoutError("no answer in time")
        part = sock.recv(remaining)
        if not part:
            raise ConnectionError("closed by the server")
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)


def probe_for(client: KazooClient, session_timeout: float) -> Probe:
    """The probe a replica with sessions of ``session_timeout`` seconds moves with: unless
    told otherwise it waits a tenth of the session (0.3-1 s), so a move still lands before
    the session would expire on the quorum's side."""
    default = min(1.0, max(0.3, session_timeout / 10))

    def probe(
        servers: list[tuple[str, int]], timeout: float | None = None
    ) -> list[tuple[str, int]]:
        return servers_reaching_quorum(client, servers, default if timeout is None else timeout)

    return probe
