"""A stateful step's partitions, as its checkpoint fixes them, and changing them offline.

Spark keys a streaming aggregation's state by partition and records the partition count
in the checkpoint at the query's first start; a restarted query keeps it, whatever the
session says. Changing it needs Spark's offline repartitioning (4.2+), which rewrites
the state into a new batch of the checkpoint while no query runs, and only for the
RocksDB provider (``pipeline.session`` selects it). A checkpoint made by the HDFS-backed
provider keeps its partitions; the caller is told why.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_PARTITIONS_KEY = "spark.sql.shuffle.partitions"


@dataclass(frozen=True)
class Alignment:
    """What a checkpoint's state partitions are after ``align``, and why if not as asked."""

    partitions: int | None
    """The state partitions the query will run with (None: no checkpoint yet, Spark's
    session setting applies)."""
    note: str = ""
    """Empty when the checkpoint has the asked-for partitions; otherwise why not."""


def checkpoint_partitions(checkpoint: Path) -> int | None:
    """The state partitions recorded in the newest batch of ``checkpoint``; None if new."""
    offsets = checkpoint / "offsets"
    try:
        batches = sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return None
    if not batches:
        return None
    lines = (offsets / str(batches[-1])).read_text().splitlines()
    try:
        conf = json.loads(lines[1]).get("conf", {})
        return int(conf[_PARTITIONS_KEY])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def align(spark: SparkSession, checkpoint: Path, want: int) -> Alignment:
    """Give ``checkpoint``'s state ``want`` partitions, offline; the query must not run."""
    have = checkpoint_partitions(checkpoint)
    if have is None or have == want:
        return Alignment(have)
    try:
        manager = spark._streamingCheckpointManager  # Spark's API, still private in 4.3
        manager.repartition(str(checkpoint), want, True)
    except Exception as e:  # py4j's errors are not PySparkExceptions
        note = f"state stays in {have} partitions (Spark could not repartition it: {_reason(e)})"
        log.warning("%s: %s", checkpoint, note)
        return Alignment(have, note)
    log.info("%s: state repartitioned from %d to %d partitions", checkpoint, have, want)
    return Alignment(want)


def _reason(e: Exception) -> str:
    """Spark's own message: the line with its error class, not py4j's 'error calling o46'."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    for line in lines:
        if "[" in line and "]" in line:
            return line.split(": ", 1)[-1] if line.startswith("org.") else line
    return lines[0] if lines else type(e).__name__
