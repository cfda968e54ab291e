"""The two ways bench/code_sync_throughput.py moves a package: the replicas' own sync (gRPC
DownloadCode into a CodeStore) and a raw loopback socket doing the same hashing, writing and
fsync.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import tempfile
import threading
from pathlib import Path

from _code_sync_cluster import MAX_PACKAGE_MIB, MIB, Package, Replica
from _common import BenchError

from code_sync.peer import fetch_from_peer
from code_sync.store import CodeStore, fsync_dir

MAX_PACKAGE_BYTES = MAX_PACKAGE_MIB * MIB
FETCH_TIMEOUT_S = 600.0
RAW_CHUNK = 1 << 20  # the raw server's send size and the client's buffer


# -- the two transfers ------------------------------------------------------------------


def sync_once(source: Replica, package: Package, dest: Path) -> None:
    """What a syncing replica does for a package it lacks (``CodeSyncer._download``)."""
    store = CodeStore(dest, max_package_bytes=MAX_PACKAGE_BYTES)
    stored = store.write(
        fetch_from_peer(source.address, package.digest, timeout=FETCH_TIMEOUT_S),
        expected_digest=package.digest,
        validate=False,  # as the syncer: the digest names a package validated at submit
    )
    if stored.size != package.size:
        raise BenchError(f"sync stored {stored.size} bytes, expected {package.size}")


class RawServer:
    """One connection's worth of loopback TCP server: sends a file in ``RAW_CHUNK`` chunks.

    Listening before the clock starts, like the replica's gRPC server; accepts, sends and
    closes in its own thread.
    """

    def __init__(self, source: Path) -> None:
        self._source = source
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="raw-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
            with conn, self._source.open("rb", buffering=0) as f:
                while block := f.read(RAW_CHUNK):
                    conn.sendall(block)
        except BaseException as e:  # reported by join()
            self._error = e
        finally:
            self._listener.close()

    def join(self) -> None:
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            raise BenchError("the raw socket server did not finish")
        if self._error is not None:
            raise BenchError(f"the raw socket server failed: {self._error!r}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()


def raw_once(port: int, package: Package, dest: Path) -> None:
    """Receive, hash, write, fsync, check, rename, fsync the directory."""
    dest.mkdir()
    fd, name = tempfile.mkstemp(dir=dest, prefix="raw-", suffix=".part")
    tmp = Path(name)
    hasher = hashlib.sha256()
    buffer = bytearray(RAW_CHUNK)
    view = memoryview(buffer)
    size = 0
    try:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            done = False
            while not done:
                filled = 0
                while filled < RAW_CHUNK:
                    n = conn.recv_into(view[filled:])
                    if n == 0:
                        done = True
                        break
                    filled += n
                if filled:
                    block = view[:filled]
                    hasher.update(block)
                    while block:
                        block = block[os.write(fd, block) :]
                    size += filled
        os.fsync(fd)
    finally:
        os.close(fd)
    digest = hasher.hexdigest()
    if digest != package.digest or size != package.size:
        raise BenchError(f"raw transfer got {size} bytes hashing to {digest}")
    os.replace(tmp, dest / digest)
    fsync_dir(dest)
