"""Which checkpoint published a batch: what lets a moved worker account for its output.

Exactly-once at a sink rests on one checkpoint: Spark replays a batch id with the same
rows only from the checkpoint that planned it. A worker that resumes from another
checkpoint (a fresh one on the supervisor a slot moved to, say) numbers its batches from 0
again over other input, so "batch N is already published: skip it" would drop its rows
without a word. So every checkpoint has a lineage (a random id made with it and kept in
it), every published batch records the lineage that published it, and a batch found
published by another lineage, or by none, is refused loudly (``UnaccountedBatchError``),
never skipped.

A file sink keeps its query's checkpoint and these records beside its output, in
``<folder>/_nimbus/`` (as Spark's own file sink keeps ``_spark_metadata`` there): whoever
can read the output can resume it, so a slot may move to any supervisor with nothing to
configure. Readers of the folder ignore the name (Spark and Hadoop skip ``_`` names; the
batch files are ``batch-<id>.<format>``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from pathlib import Path

from pipeline.errors import UnaccountedBatchError

#: The folder beside a file sink's output that holds its checkpoint and its records.
META_DIR = "_nimbus"
LINEAGE_FILE = "nimbus-lineage"


def sink_checkpoint(folder: Path) -> Path:
    """Where a file sink's query keeps its checkpoint: beside the output it protects."""
    return folder / META_DIR / "checkpoint"


def checkpoint_lineage(checkpoint: Path) -> str:
    """The checkpoint's lineage; one is made, exclusively, for a checkpoint without one."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    path = checkpoint / LINEAGE_FILE
    with contextlib.suppress(FileNotFoundError):
        return _read_lineage(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{LINEAGE_FILE}.", dir=checkpoint)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(uuid.uuid4().hex + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # two starts at once agree on the first
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(checkpoint)
    return _read_lineage(path)


def _read_lineage(path: Path) -> str:
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise UnaccountedBatchError(f"checkpoint lineage file {path} is empty")
    return text


def last_planned_batch(checkpoint: Path) -> int:
    """The newest batch id the checkpoint planned (its offsets log), -1 for none yet.

    Spark writes a batch's offsets before it runs the batch, so every batch this
    checkpoint's query ever handed a sink has an id at most this.
    """
    offsets = checkpoint / "offsets"
    try:
        names = [p.name for p in offsets.iterdir()]
    except FileNotFoundError:
        return -1
    return max((int(n) for n in names if n.isdigit()), default=-1)


def _record_path(folder: Path, batch_id: int) -> Path:
    return folder / META_DIR / "published" / f"{batch_id:012d}.json"


def record_published(folder: Path, batch_id: int, lineage: str, rows: int) -> None:
    """Note, durably, that ``lineage`` publishes ``batch_id`` (before the batch's file)."""
    path = _record_path(folder, batch_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"batch_id": batch_id, "lineage": lineage, "rows": rows}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(path.parent)


def published_by(folder: Path, batch_id: int) -> str | None:
    """The lineage that published ``batch_id`` into ``folder``, None when none recorded."""
    try:
        data = json.loads(_record_path(folder, batch_id).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    lineage = data.get("lineage") if isinstance(data, dict) else None
    return lineage if isinstance(lineage, str) else None


def account_for(folder: Path, batch_id: int, final: Path, lineage: str) -> None:
    """Raise unless the published ``final`` came from this checkpoint (a true replay)."""
    owner = published_by(folder, batch_id)
    if owner == lineage:
        return
    source = f"checkpoint lineage {owner}" if owner else "no checkpoint on record"
    raise UnaccountedBatchError(
        f"file sink: batch {batch_id} at {final} was published by {source}, not by "
        f"this worker's checkpoint (lineage {lineage}): its batch {batch_id} covers other "
        "input, so skipping it would lose rows and writing it would repeat others; nothing "
        "published. Resume from the checkpoint that published it, or move the folder's "
        "batch files aside to start the output over"
    )


def fsync_dir(folder: Path) -> None:
    """Make a rename or link in ``folder`` durable (some filesystems refuse: best effort)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
