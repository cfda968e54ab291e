"""The local package store: content-addressed by SHA-256, written atomically, verified on read.

Layout: ``<root>/<digest>`` for packages (flat, 64 lowercase hex names, read-only files),
``<root>/.incoming/`` for writes in progress (same filesystem, so the final
``os.replace`` is atomic), ``<root>/.damaged-<digest>`` for files that failed
verification (moved out of the digest namespace, kept for an operator to inspect; at most
one per digest). A reader therefore sees either no file or a complete one, never a
partial write, and a damaged file is never served to its end as good.

Files are never modified in place: a package is replaced whole or removed. One
``CodeStore`` owns a root; on start it deletes what a previous run left in ``.incoming``.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from cluster.names import is_digest
from code_sync.errors import InvalidDigest, PackageNotFound, PackageRejected, StoreError
from code_sync.package import UNCOMPRESSED_FACTOR, format_size, size_over_limit, validate_package

log = logging.getLogger(__name__)

INCOMING = ".incoming"
DAMAGED_PREFIX = ".damaged-"
DEFAULT_CHUNK = 1 << 20

# dev, ino, size, mtime_ns, ctime_ns of a file whose content was verified.
_StatKey = tuple[int, int, int, int, int]


def require_digest(digest: str) -> str:
    """Return ``digest`` if ``is_digest``, else raise ``InvalidDigest`` (a ``PackageRejected``).

    A digest becomes a file name, so anything else (``..``, ``/``, upper case aliases)
    must never reach the filesystem. An API argument is checked by ``check_digest_arg``.
    """
    if not is_digest(digest):
        raise InvalidDigest(f"invalid digest {digest!r}: expected 64 lowercase hex characters")
    return digest


@dataclass(frozen=True, slots=True)
class StoredPackage:
    digest: str
    size: int
    path: Path


def _describe(e: OSError) -> str:
    reason = e.strerror or str(e)
    if e.errno == errno.ENOSPC:
        return f"{reason} (disk full)"
    if e.errno == errno.EDQUOT:
        return f"{reason} (disk quota exceeded)"
    return reason


@contextmanager
def _disk(what: str) -> Iterator[None]:
    """Turn an ``OSError`` of our own disk operations into a ``StoreError`` naming it."""
    try:
        yield
    except OSError as e:
        raise StoreError(f"{what}: {_describe(e)}") from e


def _key(st: os.stat_result) -> _StatKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable: the new entry lives in the directory's data."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    with suppress(OSError):
        path.unlink(missing_ok=True)


class CodeStore:
    """Packages on local disk by SHA-256 digest. Thread-safe.

    Concurrent writes of the same digest are safe: each streams into its own temp file
    and ``os.replace`` is atomic, so the last one wins with identical content.
    """

    fresh_margin_ns: int = 1_000_000_000
    """A verification is cached only for files last changed longer ago than this.

    File timestamps come from a coarse clock (a few ms), so a change made right after a
    verification can leave mtime and ctime equal to the cached ones; a file older than the
    margin cannot be changed without moving them forward (the trick git uses for "racily
    clean" index entries).
    """

    def __init__(
        self,
        root: Path,
        *,
        max_package_bytes: int,
        max_uncompressed_bytes: int | None = None,
    ) -> None:
        if max_package_bytes <= 0:
            raise ValueError(f"max_package_bytes must be positive, not {max_package_bytes}")
        self._root = Path(root)
        self._incoming = self._root / INCOMING
        self.max_package_bytes = max_package_bytes
        self.max_uncompressed_bytes = (
            UNCOMPRESSED_FACTOR * max_package_bytes
            if max_uncompressed_bytes is None
            else max_uncompressed_bytes
        )
        self._lock = threading.Lock()  # guards the digest namespace and the cache
        self._verified: dict[str, _StatKey] = {}
        with _disk(f"cannot prepare the code store at {self._root}"):
            self._incoming.mkdir(parents=True, exist_ok=True)
            self._clean_incoming()

    @property
    def root(self) -> Path:
        return self._root

    def _clean_incoming(self) -> None:
        """Delete temp files of writes a previous run did not finish."""
        removed = 0
        with os.scandir(self._incoming) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False) or entry.is_symlink():
                    os.unlink(entry.path)
                    removed += 1
        if removed:
            log.info("removed %d unfinished package write(s) from %s", removed, self._incoming)

    def path(self, digest: str) -> Path:
        """Where the package with this digest lives (whether or not it is there)."""
        return self._root / require_digest(digest)

    # -- writing ---------------------------------------------------------------------------

    def write(
        self,
        chunks: Iterable[bytes],
        *,
        expected_digest: str | None,
        expected_size: int | None = None,
        validate: bool = True,
    ) -> StoredPackage:
        """Store a package streamed as ``chunks``; all or nothing.

        Stops reading as soon as the stream passes ``max_package_bytes``. Raises
        ``PackageRejected`` for a package that is too big, of the wrong digest or size, or
        (with ``validate``) not a safe package; ``StoreError`` for local disk trouble.
        Exceptions raised by ``chunks`` itself (a broken upload stream) pass through
        unchanged. In every failure the temp file is removed and the store is unchanged.
        """
        if expected_digest is not None:
            require_digest(expected_digest)
        limit = self.max_package_bytes
        if expected_size is not None:
            if expected_size < 0:
                raise PackageRejected(f"negative package size {expected_size}")
            if expected_size > limit:
                raise PackageRejected(size_over_limit(expected_size, limit))
        with _disk(f"cannot create a temporary file in {self._incoming}"):
            fd, name = tempfile.mkstemp(dir=self._incoming, prefix="pkg-", suffix=".part")
        tmp = Path(name)
        placed = False
        try:
            digest, size = self._receive(fd, tmp, chunks)
            if expected_size is not None and size != expected_size:
                raise PackageRejected(f"size mismatch: expected {expected_size} bytes, got {size}")
            if expected_digest is not None and digest != expected_digest:
                raise PackageRejected(f"digest mismatch: expected {expected_digest}, got {digest}")
            if validate:
                validate_package(
                    tmp, max_bytes=limit, max_uncompressed_bytes=self.max_uncompressed_bytes
                )
            final = self._root / digest
            if self.has(digest):
                return StoredPackage(digest, size, final)  # finally drops the temp file
            with self._lock, _disk(f"cannot move package {digest} into {self._root}"):
                os.replace(tmp, final)
                placed = True
            # The file is complete and verified; a failure here only leaves its
            # durability in doubt, so it stays and the caller hears about the disk.
            with _disk(f"cannot sync directory {self._root}"):
                fsync_dir(self._root)
            return StoredPackage(digest, size, final)
        finally:
            if not placed:
                _discard(tmp)

    def _receive(self, fd: int, tmp: Path, chunks: Iterable[bytes]) -> tuple[str, int]:
        """Copy ``chunks`` into ``fd`` (closed on return), hashing; return digest and size."""
        limit = self.max_package_bytes
        hasher = hashlib.sha256()
        size = 0
        what = f"cannot write package to {tmp.parent}"
        try:
            for chunk in chunks:  # the stream's own errors are not ours to rename
                size += len(chunk)
                if size > limit:
                    raise PackageRejected(
                        f"package is over the {format_size(limit)} limit "
                        f"(more than {limit} bytes sent)"
                    )
                hasher.update(chunk)
                with _disk(what):
                    _write_all(fd, chunk)
            with _disk(what):
                os.fchmod(fd, 0o444)  # content-addressed files are immutable
                os.fsync(fd)
        except BaseException:
            with suppress(OSError):
                os.close(fd)
            raise
        with _disk(what):
            os.close(fd)
        return hasher.hexdigest(), size

    # -- verifying and reading -------------------------------------------------------------

    def has(self, digest: str) -> bool:
        """True only when the package is present and its content hashes to ``digest``.

        A damaged file is moved aside and reported missing, so the caller fetches it
        again. The result is cached by (device, inode, size, mtime, ctime) so repeated
        calls don't re-hash; a change that keeps all of those equal (bit rot, or a write
        racing the clock tick that ``fresh_margin_ns`` guards) goes unseen here but is
        caught when the package is read: ``read_chunks`` and ``open_verified`` always hash.
        """
        path = self._root / require_digest(digest)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StoreError(f"cannot stat package {digest}: {_describe(e)}") from e
        if not stat.S_ISREG(st.st_mode):
            return False
        if self._verified.get(digest) == _key(st):
            return True
        try:
            with open(path, "rb") as f:
                return self._verify_open(digest, f)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StoreError(f"cannot read package {digest}: {_describe(e)}") from e

    def _verify_open(self, digest: str, f: io.BufferedReader) -> bool:
        """Hash an open package file; remember a match, move a mismatch aside."""
        started = time.time_ns()
        before = os.fstat(f.fileno())
        actual = hashlib.file_digest(f, "sha256").hexdigest()
        after = os.fstat(f.fileno())
        if actual != digest:
            self._quarantine(digest, after, actual)
            return False
        self._remember(digest, before, after, started)
        return True

    def _remember(
        self, digest: str, before: os.stat_result, after: os.stat_result, started_ns: int
    ) -> None:
        changed = max(after.st_mtime_ns, after.st_ctime_ns)
        if _key(before) == _key(after) and changed < started_ns - self.fresh_margin_ns:
            with self._lock:
                self._verified[digest] = _key(after)

    def _quarantine(self, digest: str, hashed: os.stat_result, actual: str) -> None:
        """Move the file we hashed out of the namespace, unless a good copy replaced it."""
        path = self._root / digest
        aside = self._root / f"{DAMAGED_PREFIX}{digest}"
        with self._lock:
            self._verified.pop(digest, None)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                return
            except OSError as e:
                raise StoreError(f"cannot stat package {digest}: {_describe(e)}") from e
            if (current.st_dev, current.st_ino) != (hashed.st_dev, hashed.st_ino):
                return
            with _disk(f"cannot move damaged package {digest} aside"):
                os.replace(path, aside)
        log.warning(
            "package %s is damaged (content hashes to %s): moved aside to %s",
            digest,
            actual,
            aside,
        )

    def size(self, digest: str) -> int:
        """Size in bytes of the stored file (unverified: pair with ``has``)."""
        path = self._root / require_digest(digest)
        try:
            return os.stat(path).st_size
        except FileNotFoundError as e:
            raise PackageNotFound(f"no package {digest} in this store") from e
        except OSError as e:
            raise StoreError(f"cannot stat package {digest}: {_describe(e)}") from e

    def read_chunks(
        self, digest: str, *, chunk_size: int = DEFAULT_CHUNK, offset: int = 0
    ) -> Iterator[bytes]:
        """Stream the package from ``offset``, verifying it as it goes.

        The bytes before ``offset`` are read and hashed too (not yielded), so the check
        at the end always covers the whole file: after the last good chunk, a damaged
        file raises ``StoreError`` (and is moved aside) instead of ending normally, and a
        consumer that waits for the normal end never takes it as good. Arguments and
        presence are checked now (``PackageNotFound``); the file is opened on first use.
        """
        path = self._root / require_digest(digest)
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        if offset < 0:
            raise ValueError(f"offset must not be negative, not {offset}")
        if not path.is_file():
            raise PackageNotFound(f"no package {digest} in this store")
        return self._stream(digest, path, chunk_size, offset)

    def _stream(self, digest: str, path: Path, chunk_size: int, offset: int) -> Iterator[bytes]:
        what = f"cannot read package {digest}"
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed by the with below, in the generator
        except FileNotFoundError as e:
            raise PackageNotFound(f"no package {digest} in this store") from e
        except OSError as e:
            raise StoreError(f"{what}: {_describe(e)}") from e
        with f:
            started = time.time_ns()
            with _disk(what):
                before = os.fstat(f.fileno())
            hasher = hashlib.sha256()
            skip = offset
            while skip > 0:
                with _disk(what):
                    block = f.read(min(chunk_size, skip))
                if not block:
                    break
                hasher.update(block)
                skip -= len(block)
            while True:
                with _disk(what):
                    block = f.read(chunk_size)
                if not block:
                    break
                hasher.update(block)
                yield block
            with _disk(what):
                after = os.fstat(f.fileno())
        actual = hasher.hexdigest()
        if actual != digest:
            self._quarantine(digest, after, actual)
            raise StoreError(f"package {digest} is damaged: its content hashes to {actual}")
        self._remember(digest, before, after, started)

    def open_verified(self, digest: str) -> BinaryIO:
        """Open the package after hashing it through the same descriptor; caller closes.

        For unpacking a package to run it: the open file is the inode just verified, and
        store files are replaced, never rewritten, so what is read is what was checked.
        Always hashes (ignores the cache). Raises ``PackageNotFound`` or ``StoreError``
        (damaged: the file is moved aside).
        """
        path = self._root / require_digest(digest)
        try:
            f = open(path, "rb")  # noqa: SIM115 - returned to the caller open
        except FileNotFoundError as e:
            raise PackageNotFound(f"no package {digest} in this store") from e
        except OSError as e:
            raise StoreError(f"cannot open package {digest}: {_describe(e)}") from e
        try:
            with _disk(f"cannot read package {digest}"):
                good = self._verify_open(digest, f)
                f.seek(0)
        except BaseException:
            f.close()
            raise
        if not good:
            f.close()
            raise StoreError(f"package {digest} is damaged: moved aside")
        return f

    # -- listing and removing --------------------------------------------------------------

    def digests(self) -> set[str]:
        """Digests of the files present (unverified: ``has`` verifies one)."""
        with _disk(f"cannot list the code store at {self._root}"), os.scandir(self._root) as it:
            return {e.name for e in it if is_digest(e.name) and e.is_file(follow_symlinks=False)}

    def remove(self, digest: str) -> bool:
        """Delete a package; False when it was not there."""
        path = self._root / require_digest(digest)
        with self._lock:
            self._verified.pop(digest, None)
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            except OSError as e:
                raise StoreError(f"cannot remove package {digest}: {_describe(e)}") from e
        return True
