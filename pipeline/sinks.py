"""Sinks: a callback per micro-batch, an idempotent file per batch id, and the console.

Exactly-once output comes from Spark replaying a micro-batch with the same batch id and
the same rows after a crash, plus a sink that publishes each batch id at most once. The
file sink does that with a hard link, which fails if the name exists, so two writers
racing on one batch cannot both publish (Spark's own file sink refuses aggregations
without a watermark, so it cannot carry running counts).

Under a worker, sinks are fenced (``BatchFence``, set by ``pipeline.worker``): each batch
passes ``gate`` before it is evaluated, and the file sink links a batch into place only
after ``commit`` (one ZooKeeper multi-op that checks the worker's claim) succeeded, so a
worker that lost its claim publishes nothing and a reader of the folder sees only
committed batches. A callback sink gets the gate only: its side effects are its own.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import pyarrow.csv as pa_csv  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql import DataFrame
from pyspark.sql.streaming.readwriter import DataStreamWriter

from pipeline.components import Sink
from pipeline.errors import SinkError
from pipeline.lineage import META_DIR, account_for, fsync_dir, record_published

log = logging.getLogger(__name__)

FileFormat = Literal["jsonl", "csv", "parquet"]
BatchCallback = Callable[[DataFrame, int], None]
_BATCH_RE = re.compile(r"^batch-(\d{12})\.(jsonl|csv|parquet)$")


class BatchFence(Protocol):
    """The worker's claim as a sink sees it (``pipeline.commits.SinkFence``)."""

    def gate(self, batch_id: int) -> None:
        """Raise when nothing may be published now; called before a batch is evaluated."""

    def commit(self, batch_id: int) -> bool:
        """Commit the batch under the claim (raise when refused); False: committed before."""


class CallbackSink(Sink):
    """Calls ``fn(batch_frame, batch_id)`` on the driver for every micro-batch.

    After a crash Spark may call it again with the same batch id and the same rows:
    make ``fn`` idempotent per batch id for exactly-once output. ``fn`` must evaluate
    the whole frame every time (even when it publishes nothing): with a stateful bolt
    upstream, PySpark 4.3 fails the query if a batch's state stores were not committed.
    """

    def __init__(self, fn: BatchCallback) -> None:
        self.fn = fn
        self.fence: BatchFence | None = None

    def writer(self, frame: DataFrame) -> DataStreamWriter:
        return frame.writeStream.foreachBatch(self._call)

    def _call(self, frame: DataFrame, batch_id: int) -> None:
        if self.fence is not None:
            self.fence.gate(batch_id)
        self.fn(frame, batch_id)


class ConsoleSink(Sink):
    """Prints each micro-batch on the driver's stdout (Spark's console sink), for demos."""

    def __init__(self, num_rows: int = 20, truncate: bool = False) -> None:
        self.num_rows = num_rows
        self.truncate = truncate

    def writer(self, frame: DataFrame) -> DataStreamWriter:
        return (
            frame.writeStream.format("console")
            .option("numRows", str(self.num_rows))
            .option("truncate", str(self.truncate).lower())
        )


class FileSink(Sink):
    """One file per micro-batch, ``batch-<id>.<format>`` in ``folder``, each published once.

    A batch is collected to the driver through Arrow, written to a temporary file, fsynced
    and hard-linked into place. Empty batches get an empty file too: the file set says
    exactly which batch ids were published. ``before_publish(batch_id)`` runs just before
    the link; raising there publishes nothing. With a ``fence`` (set by the worker) the
    link follows only a successful commit under the worker's claim.

    ``lineage`` (set by ``pipeline.runner`` from the query's checkpoint) is recorded for
    every batch before its file (``pipeline.lineage``). A batch id whose file exists is a
    replay when this lineage published it (not written twice); published by any other
    lineage, or by none, it is refused with ``UnaccountedBatchError``: never skipped.
    """

    def __init__(
        self,
        folder: str | Path,
        file_format: FileFormat = "jsonl",
        *,
        before_publish: Callable[[int], None] | None = None,
    ) -> None:
        if file_format not in ("jsonl", "csv", "parquet"):
            raise SinkError(f"file sink format must be jsonl, csv or parquet, not {file_format!r}")
        self.folder = Path(folder)
        self.file_format: FileFormat = file_format
        self.before_publish = before_publish
        self.fence: BatchFence | None = None
        self.lineage: str | None = None

    def path_for(self, batch_id: int) -> Path:
        return self.folder / f"batch-{batch_id:012d}.{self.file_format}"

    def writer(self, frame: DataFrame) -> DataStreamWriter:
        return frame.writeStream.foreachBatch(self.write_batch)

    def write_batch(self, frame: DataFrame, batch_id: int) -> None:
        """Publish one micro-batch unless its file is already there."""
        fence = self.fence
        if fence is not None:
            fence.gate(batch_id)  # before anything is evaluated or written
        final = self.path_for(batch_id)
        lineage = self.lineage
        if final.exists():
            if lineage is None:
                raise SinkError(
                    f"file sink: batch {batch_id} at {final} exists and this sink has no "
                    "checkpoint lineage to account for it (run it through pipeline.runner)"
                )
            account_for(self.folder, batch_id, final, lineage)
            # Still run the batch: PySpark 4.3 fails the query ("STATE_STORE_COMMIT_
            # VALIDATION_FAILED") if a replayed stateful batch leaves its state uncommitted.
            frame.write.format("noop").mode("overwrite").save()
            log.info("file sink: batch %d replayed; this checkpoint published it before", batch_id)
            return
        table = frame.toArrow()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", dir=self.folder)
            tmp = Path(tmp_name)
            try:
                with os.fdopen(fd, "wb") as out:
                    _write_table(table, out, self.file_format)
                    out.flush()
                    os.fchmod(out.fileno(), 0o644)  # mkstemp's 0600 would hide it from readers
                    os.fsync(out.fileno())
                if self.before_publish is not None:
                    self.before_publish(batch_id)
                if fence is not None:
                    fence.commit(batch_id)  # raises when the claim is lost: nothing published
                if lineage is not None:
                    record_published(self.folder, batch_id, lineage, table.num_rows)
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    log.info("file sink: batch %d published by another writer", batch_id)
                    return
                fsync_dir(self.folder)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as e:
            raise SinkError(f"file sink could not publish batch {batch_id} to {final}: {e}") from e

    def batches(self) -> list[tuple[int, list[dict[str, Any]]]]:
        """The published batches in batch-id order, each as a list of row dicts."""
        return read_batches(self.folder)


#: A file sink folder's owner: the topology id whose batches it holds.
OWNER_FILE = ".nimbus-topology"
_ADOPT_LOCK = ".nimbus-topology.lock"

#: Answers whether a folder's former owner gives it up, waiting (bounded) for it to.
GivesUp = Callable[[str], bool]


def adopt_folder(folder: Path, topology_id: str, gives_up: GivesUp) -> str | None:
    """Make ``folder`` hold ``topology_id``'s batches; returns what was moved aside, if any.

    Batch ids restart at 0 for every topology: a new topology writing where another wrote
    would find its batch ids taken. So a folder remembers its topology, and another
    topology's batches, with its checkpoint and records (``_nimbus/``), are moved into a
    ``.previous-<its id>[-n]/`` folder of their own (kept, never overwritten) before the
    first batch. ``gives_up(owner)`` decides whether the former owner lets go: the caller
    answers at once for a removed or still-scheduled owner and waits (bounded) for a
    killed one's workers to drain. Adoption is exclusive: the check and the move happen
    under a lock on the folder, so of two topologies adopting one folder only one wins.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / _ADOPT_LOCK, "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            return _adopt_locked(folder, topology_id, gives_up)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _adopt_locked(folder: Path, topology_id: str, gives_up: GivesUp) -> str | None:
    marker = folder / OWNER_FILE
    try:
        owner = marker.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        owner = ""
    if owner == topology_id:
        return None
    if owner and not gives_up(owner):
        raise SinkError(
            f"file sink folder {folder} holds the output of topology {owner}, which is "
            "still scheduled: give this topology a folder of its own, or kill that one"
        )
    old = sorted(p for p in folder.iterdir() if _BATCH_RE.match(p.name) or p.name == META_DIR)
    moved: str | None = None
    if old:
        archive = _new_archive(folder, owner or "unknown")
        for path in old:
            os.replace(path, archive / path.name)
        count = sum(1 for p in old if p.name != META_DIR)
        moved = f"{count} batch file(s) of {owner or 'an unknown run'} moved to {archive}"
    fd, tmp = tempfile.mkstemp(prefix=f"{OWNER_FILE}.", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(topology_id + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, marker)
    fsync_dir(folder)
    return moved


def _new_archive(folder: Path, owner: str) -> Path:
    """A ``.previous-<owner>`` folder not used before: an archive is never written over."""
    for n in range(1, 10_000):
        archive = folder / (f".previous-{owner}" if n == 1 else f".previous-{owner}-{n}")
        try:
            archive.mkdir()
        except FileExistsError:
            continue
        return archive
    raise SinkError(f"file sink folder {folder}: no free name for an archive of {owner}")


def _write_table(table: Any, out: Any, file_format: FileFormat) -> None:
    if file_format == "parquet":
        pq.write_table(table, out)
    elif file_format == "csv":
        pa_csv.write_csv(table, out)
    else:
        for row in table.to_pylist():
            out.write(json.dumps(row, default=str, ensure_ascii=False).encode() + b"\n")


def read_batches(folder: str | Path) -> list[tuple[int, list[dict[str, Any]]]]:
    """Read a ``FileSink`` folder back: ``[(batch_id, rows), ...]`` sorted by batch id."""
    found: list[tuple[int, list[dict[str, Any]]]] = []
    root = Path(folder)
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        match = _BATCH_RE.match(path.name)
        if not match:
            continue
        batch_id, fmt = int(match.group(1)), match.group(2)
        if fmt == "jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines() if line]
        elif fmt == "csv":
            rows = pa_csv.read_csv(path).to_pylist() if path.stat().st_size else []
        else:
            rows = pq.read_table(path).to_pylist()
        found.append((batch_id, rows))
    return found


def latest_by_key(
    batches: list[tuple[int, list[dict[str, Any]]]], *keys: str
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Replay ``update``-mode output: the last row seen for each key, in batch order."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for _, rows in sorted(batches, key=lambda b: b[0]):
        for row in rows:
            latest[tuple(row[k] for k in keys)] = row
    return latest
