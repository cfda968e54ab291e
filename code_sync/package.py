"""Topology packages: zip archives checked before they enter the store.

A package is later unpacked on other machines, so every entry must stay inside the
unpack directory (no ``..``, absolute paths, drive letters, backslashes or symbolic
links) and the archive must not be a decompression bomb. Only stored and deflated
entries are accepted: deflate's expansion is bounded and ``zipfile`` decompresses it
incrementally, while bzip2 and lzma chunks can expand without limit before truncation.
"""

from __future__ import annotations

import io
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path

from code_sync.errors import PackageRejected, StoreError

TOPOLOGY_ENTRY = "topology.py"
DEFAULT_MAX_ENTRIES = 10_000
UNCOMPRESSED_FACTOR = 16
"""Default limit on the total uncompressed size, as a multiple of the package limit."""

# 1980-01-01 is the earliest time zip can hold: a fixed stamp makes equal files equal zips.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_ALLOWED_COMPRESSION = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
_READ_CHUNK = 1 << 16
_NAME_SHOWN = 100


def format_size(n: int) -> str:
    """Human size for messages: bytes, KiB or MiB with one decimal."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} bytes"


def size_over_limit(size: int, limit: int, subject: str = "package is") -> str:
    """'package is 12.0 MiB, over the 8.0 MiB limit', exact bytes when rounding hides it."""
    shown, cap = format_size(size), format_size(limit)
    if shown == cap:
        shown, cap = f"{size} bytes", f"{limit}-byte"
    return f"{subject} {shown}, over the {cap} limit"


def validate_package(
    path: Path,
    *,
    max_bytes: int,
    max_uncompressed_bytes: int | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> None:
    """Raise ``PackageRejected`` unless ``path`` is a safe, intact topology package.

    The file (at most ``max_bytes``) is read into memory before parsing, so any error
    from the zip parser is the package's fault and only the read itself can be ours
    (``StoreError``). Every entry is decompressed once to check its CRC: a package that
    passes here unpacks without error elsewhere.
    """
    limit_uncompressed = (
        UNCOMPRESSED_FACTOR * max_bytes
        if max_uncompressed_bytes is None
        else max_uncompressed_bytes
    )
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise PackageRejected(size_over_limit(size, max_bytes))
        data = path.read_bytes()
    except OSError as e:
        raise StoreError(f"cannot read package {path}: {e.strerror or e}") from e
    if len(data) > max_bytes:  # grew between stat and read
        raise PackageRejected(size_over_limit(len(data), max_bytes))
    check_package_bytes(data, max_uncompressed_bytes=limit_uncompressed, max_entries=max_entries)


def check_package_bytes(
    data: bytes, *, max_uncompressed_bytes: int, max_entries: int = DEFAULT_MAX_ENTRIES
) -> None:
    """The checks of ``validate_package`` on bytes already in memory (no size limit)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise PackageRejected(f"not a zip archive ({e})") from e
    except Exception as e:
        # A malformed archive can make zipfile raise almost anything (struct, unicode,
        # value errors); whatever it is, it comes from these bytes.
        raise PackageRejected(f"not a zip archive ({_cause(e)})") from e
    with archive:
        infos = archive.infolist()
        if len(infos) > max_entries:
            raise PackageRejected(
                f"package has {len(infos)} entries, over the limit of {max_entries}"
            )
        _check_entries(infos)
        total = sum(info.file_size for info in infos)
        if total > max_uncompressed_bytes:
            raise PackageRejected(
                size_over_limit(total, max_uncompressed_bytes, subject="package unpacks to")
            )
        if not any(i.orig_filename == TOPOLOGY_ENTRY and not i.is_dir() for i in infos):
            raise PackageRejected(f"no {TOPOLOGY_ENTRY} at the root of the package")
        for info in infos:
            _check_content(archive, info)


def _shown(name: str) -> str:
    """Quoted, escaped and short: names reach 64 KiB, messages travel in gRPC trailers."""
    if len(name) > _NAME_SHOWN:
        return f"{name[:_NAME_SHOWN]!r}... ({len(name)} characters)"
    return repr(name)


def _cause(e: BaseException) -> str:
    """The parser's complaint, cut short for the same reason as ``_shown``."""
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 2 * _NAME_SHOWN else text[: 2 * _NAME_SHOWN] + "..."


def _check_entries(infos: list[zipfile.ZipInfo]) -> None:
    files: set[str] = set()
    dirs: set[str] = set()
    seen: set[str] = set()
    for info in infos:
        name = info.orig_filename  # before zipfile cuts it at a NUL byte
        _check_name(name)
        if name in seen:
            raise PackageRejected(f"duplicate entry {_shown(name)}")
        seen.add(name)
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise PackageRejected(f"entry {_shown(name)} is a symbolic link")
        if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise PackageRejected(f"entry {_shown(name)} is a special file (mode {mode:o})")
        if info.flag_bits & 0x1:
            raise PackageRejected(f"entry {_shown(name)} is encrypted")
        if info.compress_type not in _ALLOWED_COMPRESSION:
            raise PackageRejected(
                f"entry {_shown(name)} uses compression method {info.compress_type}; "
                "only stored and deflated are accepted"
            )
        parts = name.rstrip("/").split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
        if name.endswith("/"):
            if info.file_size:
                raise PackageRejected(f"directory entry {_shown(name)} has content")
            dirs.add(name.rstrip("/"))
        else:
            files.add(name)
    clash = sorted(files & dirs)
    if clash:
        raise PackageRejected(f"entry {_shown(clash[0])} is both a file and a directory")


def _check_name(name: str) -> None:
    """Reject names that could land outside the unpack directory on any platform."""
    if not name or name == "/":
        raise PackageRejected(f"entry {_shown(name)} has an empty name")
    if any(ord(c) < 0x20 or c == "\x7f" for c in name):
        raise PackageRejected(f"entry {_shown(name)} has a control character in its name")
    if "\\" in name:
        raise PackageRejected(f"entry {_shown(name)} contains a backslash")
    if ":" in name:
        raise PackageRejected(f"entry {_shown(name)} contains ':' (a Windows drive or stream)")
    if name.startswith("/"):
        raise PackageRejected(f"entry {_shown(name)} is an absolute path")
    parts = name.removesuffix("/").split("/")
    if ".." in parts:
        raise PackageRejected(f"entry {_shown(name)} escapes the package")
    if any(p in ("", ".") for p in parts):
        raise PackageRejected(f"entry {_shown(name)} has an empty or '.' path component")


def _check_content(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Decompress one entry in bounded chunks; zipfile checks the CRC at its end."""
    if info.is_dir():
        return
    try:
        with archive.open(info) as member:
            while member.read(_READ_CHUNK):
                pass
    except Exception as e:
        # zipfile, zlib and struct all raise their own types on damaged data.
        raise PackageRejected(f"entry {_shown(info.orig_filename)} is damaged ({_cause(e)})") from e


def make_package(files: Mapping[str, bytes], dest: Path) -> Path:
    """Write ``files`` as a deterministic zip at ``dest`` (same input, same bytes, same digest).

    Entries are sorted, stamped 1980-01-01 and marked as regular files (0644) or
    directories (names ending in ``/``). Names are written as given, unchecked, so tests
    can build hostile packages too.
    """
    with zipfile.ZipFile(dest, "w") as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.create_system = 3  # unix, so external_attr carries the mode
            if name.endswith("/"):
                info.external_attr = (stat.S_IFDIR | 0o755) << 16 | 0x10
                info.compress_type = zipfile.ZIP_STORED
            else:
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])
    return dest


#: Largest package a supervisor or worker accepts from a replica (replicas enforce their
#: own, usually smaller, ``--max-package-mib`` at submit).
MAX_ACCEPTED_PACKAGE_BYTES = 256 << 20
