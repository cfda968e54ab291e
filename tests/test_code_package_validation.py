"""Package validation: each bad layout rejected with its reason, then properties (hypothesis):
arbitrary and mutated bytes are only ever rejected, hostile names never escape the package,
valid packages round-trip."""

from __future__ import annotations

import io
import stat
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from code_sync.errors import (
    PackageRejected,
)
from code_sync.package import validate_package
from code_sync.store import CodeStore
from tests.test_code_store import (
    LIMIT,
    TOPOLOGY,
    chunked,
    leftovers,
    package_bytes,
    raw_zip,
    sha,
)


@pytest.fixture
def store(tmp_path: Path) -> CodeStore:
    return CodeStore(tmp_path / "code", max_package_bytes=LIMIT)


# -- package layout ----------------------------------------------------------------------------


def symlink_entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def bzip2_entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_BZIP2
    return info


BAD_PACKAGES: dict[str, tuple[bytes, str]] = {
    "dotdot": (
        package_bytes({"topology.py": TOPOLOGY, "../evil.py": b"x"}),
        "entry '../evil.py' escapes the package",
    ),
    "absolute": (
        package_bytes({"topology.py": TOPOLOGY, "/abs": b"x"}),
        "entry '/abs' is an absolute path",
    ),
    "inner-dotdot": (
        package_bytes({"topology.py": TOPOLOGY, "a/../../b": b"x"}),
        "entry 'a/../../b' escapes the package",
    ),
    "drive": (
        package_bytes({"topology.py": TOPOLOGY, "C:/evil.py": b"x"}),
        "entry 'C:/evil.py' contains ':'",
    ),
    "backslash": (
        package_bytes({"topology.py": TOPOLOGY, "..\\evil.py": b"x"}),
        "contains a backslash",
    ),
    "empty-component": (
        package_bytes({"topology.py": TOPOLOGY, "a//b.py": b"x"}),
        "entry 'a//b.py' has an empty or '.' path component",
    ),
    "control-char": (
        package_bytes({"topology.py": TOPOLOGY, "a\nb.py": b"x"}),
        "has a control character",
    ),
    "nul-in-name": (
        raw_zip([("topology.py", TOPOLOGY), ("evil.pyX.txt", b"x")]).replace(b"pyX", b"py\0"),
        "entry 'evil.py\\x00.txt' has a control character",
    ),
    "symlink": (
        raw_zip([("topology.py", TOPOLOGY), (symlink_entry("x"), b"/etc/passwd")]),
        "entry 'x' is a symbolic link",
    ),
    "duplicate": (
        raw_zip([("topology.py", TOPOLOGY), ("a.py", b"1"), ("a.py", b"2")]),
        "duplicate entry 'a.py'",
    ),
    "file-and-dir": (
        package_bytes({"topology.py": TOPOLOGY, "a": b"1", "a/b.py": b"2"}),
        "entry 'a' is both a file and a directory",
    ),
    "not-a-zip": (b"#!/bin/sh\nrm -rf /\n", "not a zip archive"),
    "empty": (b"", "not a zip archive"),
    "no-topology": (package_bytes({"main.py": TOPOLOGY}), "no topology.py at the root"),
    "topology-in-subdir": (
        package_bytes({"sub/topology.py": TOPOLOGY}),
        "no topology.py at the root of the package",
    ),
    "bzip2": (
        raw_zip([("topology.py", TOPOLOGY), (bzip2_entry("b.py"), b"x")]),
        "uses compression method 12",
    ),
    "bomb": (
        package_bytes({"topology.py": TOPOLOGY, "zeros": b"\0" * (8 << 20)}),
        "package unpacks to 8.0 MiB, over the 4.0 MiB limit",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PACKAGES))
def test_bad_package_rejected_with_reason(store: CodeStore, case: str) -> None:
    data, reason = BAD_PACKAGES[case]
    with pytest.raises(PackageRejected) as e:
        store.write(chunked(data), expected_digest=sha(data))
    assert reason in str(e.value)
    assert leftovers(store) == []


# -- properties --------------------------------------------------------------------------------

SAFE_SEGMENT = st.text(alphabet="abcxyz_-.0189", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)
SAFE_NAME = st.lists(SAFE_SEGMENT, min_size=1, max_size=4).map("/".join)
HOSTILE_SEGMENT = st.one_of(
    SAFE_SEGMENT, st.sampled_from(["", ".", "..", "C:", "a\\b", "\x00", "\n", "~", " "])
)
HOSTILE_NAME = st.one_of(
    SAFE_NAME,
    st.lists(HOSTILE_SEGMENT, min_size=1, max_size=4).map("/".join),
    st.lists(HOSTILE_SEGMENT, min_size=1, max_size=3).map(lambda p: "/" + "/".join(p)),
)
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def validate_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.zip"
        path.write_bytes(data)
        validate_package(path, max_bytes=LIMIT)


def assert_really_safe(data: bytes) -> None:
    """An independent look at a package the validator accepted."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        names = [i.orig_filename for i in archive.infolist()]
        assert len(names) == len(set(names))
        assert "topology.py" in names
        for info in archive.infolist():
            name = info.orig_filename
            assert not name.startswith("/") and "\\" not in name and ":" not in name
            assert ".." not in name.split("/")
            assert not stat.S_ISLNK(info.external_attr >> 16)
        assert sum(i.file_size for i in archive.infolist()) <= 16 * LIMIT


def mutated(data: bytes, how: int, at: int, value: int) -> bytes:
    if not data:
        return bytes([value])
    at %= len(data)
    if how == 0:  # flip a byte
        return data[:at] + bytes([data[at] ^ (value or 1)]) + data[at + 1 :]
    if how == 1:  # truncate
        return data[:at]
    if how == 2:  # insert a byte
        return data[:at] + bytes([value]) + data[at:]
    return data[:at] + data[at + 1 :]  # delete a byte


@PROPS
@given(st.binary(max_size=4096))
def test_property_arbitrary_bytes_only_rejected(data: bytes) -> None:
    try:
        validate_bytes(data)
    except PackageRejected:
        return
    assert_really_safe(data)


@PROPS
@given(
    st.dictionaries(SAFE_NAME, st.binary(max_size=300), max_size=4),
    st.integers(0, 3),
    st.integers(0, 2**16),
    st.integers(0, 255),
)
def test_property_mutated_packages_only_rejected(
    files: dict[str, bytes], how: int, at: int, value: int
) -> None:
    files = {n: b for n, b in files.items() if not n.startswith("topology.py/")}
    data = mutated(package_bytes({**files, "topology.py": TOPOLOGY}), how, at, value)
    try:
        validate_bytes(data)
    except PackageRejected:
        return
    assert_really_safe(data)


def name_is_safe(name: str) -> bool:
    if not name or name.startswith("/") or "\\" in name or ":" in name:
        return False
    if any(ord(c) < 0x20 for c in name):
        return False
    parts = name.removesuffix("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    return not name.startswith("topology.py/")  # would make topology.py a directory too


@PROPS
@given(HOSTILE_NAME, st.binary(max_size=50))
def test_property_hostile_names(name: str, content: bytes) -> None:
    written = name.split("\0")[0]  # zipfile's writer cuts a name at NUL
    if written.endswith("/"):
        content = b""  # a directory with content is rejected too, but not by name
    data = package_bytes({"topology.py": TOPOLOGY, name: content})
    if written == "topology.py" and name != written:
        with pytest.raises(PackageRejected, match=r"duplicate entry 'topology\.py'"):
            validate_bytes(data)
    elif written == "topology.py" or name_is_safe(written):
        validate_bytes(data)
    else:
        with pytest.raises(PackageRejected, match="entry"):
            validate_bytes(data)


@PROPS
@given(st.dictionaries(SAFE_NAME, st.binary(max_size=2000), max_size=5), st.integers(1, 5000))
def test_property_valid_packages_round_trip(files: dict[str, bytes], chunk: int) -> None:
    files = {n: b for n, b in files.items() if not n.startswith("topology.py/")}
    names = set(files) | {"topology.py"}
    if any(n.startswith(m + "/") for n in names for m in names):
        return  # a file that is also a directory: rejected, covered above
    data = package_bytes({**files, "topology.py": TOPOLOGY})
    with tempfile.TemporaryDirectory() as d:
        store = CodeStore(Path(d), max_package_bytes=LIMIT)
        stored = store.write(chunked(data, chunk), expected_digest=sha(data))
        assert stored.digest == sha(data)
        assert store.has(stored.digest)
        assert b"".join(store.read_chunks(stored.digest, chunk_size=chunk)) == data
        assert leftovers(store) == [stored.digest]
