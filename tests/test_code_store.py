"""The content-addressed package store and package validation, on local disk only."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tempfile
import threading
import time
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_sync.errors import (
    CodeSyncError,
    InvalidDigest,
    PackageNotFound,
    PackageRejected,
    StoreError,
)
from code_sync.package import make_package, validate_package
from code_sync.store import INCOMING, CodeStore
from tests.root_fixtures import Mount

LIMIT = 256 * 1024
TOPOLOGY = b"def build():\n    return None\n"


def package_bytes(files: dict[str, bytes]) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        return make_package(files, Path(d) / "p.zip").read_bytes()


def raw_zip(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    """A zip built entry by entry, for hostile layouts make_package would not produce."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names
        with zipfile.ZipFile(buf, "w") as archive:
            for info, data in entries:
                archive.writestr(info, data)
    return buf.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chunked(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def leftovers(store: CodeStore) -> list[str]:
    """Everything in the store directory but the (empty) incoming directory."""
    names = sorted(os.listdir(store.root))
    return [n for n in names if n != INCOMING] + sorted(os.listdir(store.root / INCOMING))


@pytest.fixture
def store(tmp_path: Path) -> CodeStore:
    return CodeStore(tmp_path / "code", max_package_bytes=LIMIT)


@pytest.fixture
def good() -> bytes:
    return package_bytes({"topology.py": TOPOLOGY, "lib/util.py": b"X = 1\n", "lib/": b""})


def damage(path: Path, *, truncate: bool = False, keep_times: bool = False) -> None:
    before = os.stat(path)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    if truncate:
        del data[len(data) // 2 :]
    else:
        data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    os.chmod(path, 0o444)
    if keep_times:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


# -- round trip ------------------------------------------------------------------------------


def test_round_trip(store: CodeStore, good: bytes) -> None:
    stored = store.write(chunked(good), expected_digest=sha(good), expected_size=len(good))
    assert stored.digest == sha(good)
    assert stored.size == len(good)
    assert stored.path == store.path(stored.digest)
    assert stat.S_IMODE(os.stat(stored.path).st_mode) == 0o444
    assert store.has(stored.digest)
    assert store.size(stored.digest) == len(good)
    assert b"".join(store.read_chunks(stored.digest, chunk_size=100)) == good
    assert b"".join(store.read_chunks(stored.digest, chunk_size=100, offset=10)) == good[10:]
    with store.open_verified(stored.digest) as f:
        assert f.read() == good
    assert store.digests() == {stored.digest}
    assert leftovers(store) == [stored.digest]
    # the same package again (no digest given): same answer, no second file, no temp file
    again = store.write([good], expected_digest=None)
    assert again == stored
    assert leftovers(store) == [stored.digest]
    assert store.remove(stored.digest)
    assert not store.remove(stored.digest)
    assert not store.has(stored.digest)
    assert leftovers(store) == []


def test_make_package_is_deterministic(tmp_path: Path) -> None:
    files = {"topology.py": TOPOLOGY, "b.py": b"b", "a/c.py": b"c"}
    first = make_package(files, tmp_path / "1.zip").read_bytes()
    time.sleep(0.01)
    second = make_package(dict(reversed(files.items())), tmp_path / "2.zip").read_bytes()
    assert first == second


def test_missing_package(store: CodeStore) -> None:
    digest = sha(b"nothing")
    assert not store.has(digest)
    with pytest.raises(PackageNotFound):
        store.read_chunks(digest)
    with pytest.raises(PackageNotFound):
        store.size(digest)
    with pytest.raises(PackageNotFound):
        store.open_verified(digest)


@pytest.mark.parametrize("digest", ["", "../" + "a" * 61, "A" * 64, "a" * 63, "a" * 65, "g" * 64])
def test_invalid_digest(store: CodeStore, good: bytes, digest: str) -> None:
    for call in (store.has, store.path, store.remove, store.size, store.read_chunks):
        with pytest.raises(InvalidDigest, match="64 lowercase hex"):
            call(digest)
    with pytest.raises(ValueError):
        store.has(digest)
    with pytest.raises(PackageRejected):
        store.write([good], expected_digest=digest)
    assert leftovers(store) == []


# -- rejected uploads --------------------------------------------------------------------------


def test_wrong_digest_rejected_nothing_stored(store: CodeStore, good: bytes) -> None:
    wrong = sha(b"other")
    with pytest.raises(PackageRejected) as e:
        store.write(chunked(good), expected_digest=wrong)
    assert str(e.value) == f"digest mismatch: expected {wrong}, got {sha(good)}"
    assert leftovers(store) == []
    assert not store.has(sha(good))


def test_wrong_size_rejected(store: CodeStore, good: bytes) -> None:
    with pytest.raises(PackageRejected, match=f"size mismatch: expected 5 bytes, got {len(good)}"):
        store.write([good], expected_digest=sha(good), expected_size=5)
    assert leftovers(store) == []


class CountingStream:
    """Chunks of a big upload, counting how many the store pulled."""

    def __init__(self, chunks: int, size: int) -> None:
        self.total = chunks
        self.size = size
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        for _ in range(self.total):
            self.pulled += 1
            yield b"\0" * self.size


def test_oversized_stream_stops_early(store: CodeStore) -> None:
    stream = CountingStream(chunks=100, size=LIMIT // 10)
    with pytest.raises(PackageRejected, match=r"over the 256\.0 KiB limit"):
        store.write(stream, expected_digest=None)
    assert stream.pulled == 11  # the chunk that crossed the limit, and not one more
    assert leftovers(store) == []


def test_declared_oversize_rejected_before_reading(store: CodeStore) -> None:
    stream = CountingStream(chunks=100, size=LIMIT // 10)
    with pytest.raises(PackageRejected, match=r"over the 256\.0 KiB limit"):
        store.write(stream, expected_digest=None, expected_size=LIMIT * 3)
    assert stream.pulled == 0
    assert leftovers(store) == []


def test_stream_error_passes_through_unrenamed(store: CodeStore, good: bytes) -> None:
    """A broken upload is the sender's problem, not local disk trouble."""

    def broken() -> Iterator[bytes]:
        yield good[:100]
        raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError):
        store.write(broken(), expected_digest=sha(good))
    assert leftovers(store) == []


# -- damaged files -----------------------------------------------------------------------------


@pytest.mark.parametrize("truncate", [True, False], ids=["truncated", "flipped-byte"])
def test_damaged_file_is_missing_and_moved_aside(
    store: CodeStore, good: bytes, truncate: bool
) -> None:
    digest = store.write([good], expected_digest=sha(good)).digest
    damage(store.path(digest), truncate=truncate)
    assert not store.has(digest)
    assert digest not in store.digests()
    assert not store.path(digest).exists()
    assert (store.root / f".damaged-{digest}").exists()
    # a good copy can be stored again
    assert store.write([good], expected_digest=digest).digest == digest
    assert store.has(digest)


def test_verification_is_cached_and_a_rewrite_still_seen(
    store: CodeStore, good: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.fresh_margin_ns = 20_000_000
    digest = store.write([good], expected_digest=sha(good)).digest
    time.sleep(0.05)  # older than the margin: a verification may be cached
    hashed = 0
    real = hashlib.file_digest

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal hashed
        hashed += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hashlib, "file_digest", counting)
    assert store.has(digest)
    assert store.has(digest)
    assert store.has(digest)
    assert hashed == 1
    # same inode, size and mtime: only ctime betrays the rewrite
    damage(store.path(digest), keep_times=True)
    assert not store.has(digest)
    assert hashed == 2


def test_fresh_file_is_not_trusted_from_cache(store: CodeStore, good: bytes) -> None:
    """A rewrite within the same clock tick as the verification must still be seen."""
    digest = store.write([good], expected_digest=sha(good)).digest
    assert store.has(digest)
    damage(store.path(digest), keep_times=True)
    assert not store.has(digest)


@pytest.mark.parametrize("offset", [0, 100])
def test_read_of_damaged_file_never_ends_normally(
    store: CodeStore, good: bytes, offset: int
) -> None:
    digest = store.write([good], expected_digest=sha(good)).digest
    damage(store.path(digest))
    received: list[bytes] = []
    with pytest.raises(StoreError, match="is damaged"):
        for chunk in store.read_chunks(digest, chunk_size=256, offset=offset):
            received.append(chunk)
    assert len(b"".join(received)) == len(good) - offset  # all served, end refused
    assert not store.path(digest).exists()


def test_open_verified_refuses_damaged_file(store: CodeStore, good: bytes) -> None:
    digest = store.write([good], expected_digest=sha(good)).digest
    damage(store.path(digest))
    with pytest.raises(StoreError, match="damaged"):
        store.open_verified(digest)
    assert digest not in store.digests()


def test_startup_removes_unfinished_writes(tmp_path: Path, good: bytes) -> None:
    store = CodeStore(tmp_path, max_package_bytes=LIMIT)
    digest = store.write([good], expected_digest=None).digest
    (tmp_path / INCOMING / "pkg-123.part").write_bytes(good[:50])
    again = CodeStore(tmp_path, max_package_bytes=LIMIT)
    assert os.listdir(tmp_path / INCOMING) == []
    assert again.has(digest)


def test_concurrent_writes_of_one_digest(store: CodeStore, good: bytes) -> None:
    results: list[str] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            results.append(store.write(chunked(good, 97), expected_digest=sha(good)).digest)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [sha(good)] * 8
    assert leftovers(store) == [sha(good)]
    assert store.has(sha(good))


def test_damaged_entry_rejected(store: CodeStore) -> None:
    data = bytearray(raw_zip([("topology.py", TOPOLOGY * 50)]))  # stored: bytes as written
    at = data.index(b"def build")
    data[at] ^= 0x20
    with pytest.raises(PackageRejected, match=r"entry 'topology\.py' is damaged"):
        store.write([bytes(data)], expected_digest=None)
    assert leftovers(store) == []


def test_size_limit_message(tmp_path: Path) -> None:
    big = tmp_path / "big.zip"
    with big.open("wb") as f:
        f.truncate(12 * 2**20)  # sparse: the size is checked before reading
    with pytest.raises(PackageRejected) as e:
        validate_package(big, max_bytes=8 * 2**20)
    assert str(e.value) == "package is 12.0 MiB, over the 8.0 MiB limit"
    with pytest.raises(PackageRejected) as e:
        validate_package(big, max_bytes=12 * 2**20 - 1)
    assert str(e.value) == "package is 12582912 bytes, over the 12582911-byte limit"


def test_entry_count_limit(tmp_path: Path) -> None:
    path = make_package({"topology.py": TOPOLOGY, **{f"m{i}.py": b"" for i in range(5)}},
                        tmp_path / "p.zip")  # fmt: skip
    validate_package(path, max_bytes=LIMIT, max_entries=6)
    with pytest.raises(PackageRejected, match="package has 6 entries, over the limit of 5"):
        validate_package(path, max_bytes=LIMIT, max_entries=5)


def test_unreadable_package_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="No such file"):
        validate_package(tmp_path / "absent.zip", max_bytes=LIMIT)


def test_unvalidated_write_stores_any_bytes(store: CodeStore) -> None:
    """Replicas copy packages the leader already validated; validation is the leader's."""
    data = b"not a zip"
    assert store.write([data], expected_digest=sha(data), validate=False).digest == sha(data)


# -- disk full ---------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path, tmpfs: Mount) -> Path:
    """A 256 KiB tmpfs."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    return tmpfs(mount_point, "256k")


def test_disk_full_leaves_store_clean(small_disk: Path) -> None:
    store = CodeStore(small_disk, max_package_bytes=2 * 2**20)
    big = package_bytes({"topology.py": TOPOLOGY, "blob.bin": os.urandom(400 * 1024)})
    with pytest.raises(StoreError) as e:
        store.write(chunked(big, 64 * 1024), expected_digest=sha(big))
    assert "No space left on device" in str(e.value)
    assert isinstance(e.value.__cause__, OSError)
    assert leftovers(store) == []

    small = package_bytes({"topology.py": TOPOLOGY})
    assert store.write([small], expected_digest=sha(small)).digest == sha(small)
    assert store.has(sha(small))

    # fill the disk, fail, free the space, succeed
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    other = package_bytes({"topology.py": TOPOLOGY, "more.py": os.urandom(8192)})
    with pytest.raises(StoreError, match="disk full"):
        store.write([other], expected_digest=sha(other))
    assert sorted(os.listdir(small_disk / INCOMING)) == []
    filler.unlink()
    assert store.write([other], expected_digest=sha(other)).digest == sha(other)
    assert store.digests() == {sha(small), sha(other)}
    assert b"".join(store.read_chunks(sha(other))) == other


def test_errors_are_code_sync_errors() -> None:
    for cls in (PackageRejected, StoreError, PackageNotFound, InvalidDigest):
        assert issubclass(cls, CodeSyncError)


def test_long_hostile_name_is_shown_short(store: CodeStore) -> None:
    name = "../" + "a" * 5000
    data = package_bytes({"topology.py": TOPOLOGY, name: b"x"})
    with pytest.raises(PackageRejected, match="escapes the package") as e:
        store.write([data], expected_digest=None)
    assert "(5003 characters)" in str(e.value)
    assert len(str(e.value)) < 300
