"""glibc allocator settings for streaming large packages.

Serving a package allocates fresh 1 MiB buffers per chunk (file read, protobuf copy,
serialised message); with glibc's defaults each is a new mmap, zero-filled page by page:
measured 32k page faults per 64 MiB download, more CPU than the SHA-256. Keeping such
blocks on the heap (mmap threshold 16 MiB) *and* not trimming it after every free (trim
threshold 256 MiB; the first setting alone made it slower) removed the faults and halved
the stream time (bench/code_sync_throughput.py). A no-op where glibc is not the allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def tune_for_streaming() -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, 16 * 1024 * 1024)) and bool(
        mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024)
    )
    if not ok:
        log.info("mallopt refused the streaming settings; keeping the allocator's defaults")
    return ok
