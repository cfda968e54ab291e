"""The local index of what this replica holds: topology id -> digest, on disk.

Written after every sync pass that changed it (temporary file, fsync, rename), read at
start, so a restarted replica passes its code gate from its own disk at once instead of
reading 10,000 records and checking 10,000 holder nodes first: seconds at that scale.
Only a hint: every digest in it is verified against the store before it counts, and the
first full pass after start corrects it either way.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from cluster.names import DIGEST_RE

log = logging.getLogger(__name__)

INDEX_NAME = ".held.json"


def load(code_dir: Path) -> dict[str, str]:
    """The saved index; empty when there is none or it does not parse (never an error)."""
    path = code_dir / INDEX_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring the held index %s: %s", path, e)
        return {}
    if not isinstance(raw, dict):
        return {}
    return {
        str(tid): str(digest)
        for tid, digest in raw.items()
        if isinstance(digest, str) and DIGEST_RE.fullmatch(digest)
    }


def save(code_dir: Path, held: dict[str, str]) -> None:
    code_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{INDEX_NAME}.", dir=code_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(held, out, separators=(",", ":"), sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, code_dir / INDEX_NAME)
    except OSError as e:
        log.warning("could not save the held index in %s: %s", code_dir, e)
        Path(tmp).unlink(missing_ok=True)
