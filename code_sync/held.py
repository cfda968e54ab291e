"""The local index of what this replica holds: topology id -> digest, and the ids whose
holder node it registered, on disk.

Written after every sync pass that changed it (temporary file, fsync, rename), read at
start, so a restarted replica passes its code gate from its own disk at once instead of
reading 10,000 records and checking 10,000 holder nodes first: seconds at that scale, all
of it ahead of any other request of the process. Every digest in it is verified against
the store before it counts; a registration is trusted as the running process trusts its
own memory of it (holder nodes are persistent, and only this replica writes its own).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cluster.names import is_digest

log = logging.getLogger(__name__)

INDEX_NAME = ".held.json"


@dataclass(frozen=True)
class Index:
    held: dict[str, str] = field(default_factory=dict)
    #: Ids whose holder node ``replica`` registered: a code dir taken over by a replica of
    #: another address (a new port, a new pod name) must register its own.
    registered: frozenset[str] = frozenset()
    replica: str = ""


def load(code_dir: Path) -> Index:
    """The saved index; empty when there is none or it does not parse (never an error)."""
    path = code_dir / INDEX_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Index()
    except (OSError, ValueError) as e:
        log.warning("ignoring the held index %s: %s", path, e)
        return Index()
    if not isinstance(raw, dict) or not isinstance(raw.get("held"), dict):
        return Index()
    held = {str(tid): str(digest) for tid, digest in raw["held"].items() if is_digest(digest)}
    registered = raw.get("registered")
    ids = frozenset(str(r) for r in registered) if isinstance(registered, list) else frozenset()
    return Index(held, ids, str(raw.get("replica", "")))


def save(code_dir: Path, index: Index) -> None:
    code_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{INDEX_NAME}.", dir=code_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            body = {
                "held": index.held,
                "registered": sorted(index.registered),
                "replica": index.replica,
            }
            json.dump(body, out, separators=(",", ":"), sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, code_dir / INDEX_NAME)
    except OSError as e:
        log.warning("could not save the held index in %s: %s", code_dir, e)
        Path(tmp).unlink(missing_ok=True)
