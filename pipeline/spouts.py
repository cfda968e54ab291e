"""Built-in spouts and a base for spouts written in Python on Spark's data source API.

Spouts must be replayable: after a crash Spark re-reads the last uncommitted micro-batch
from the offsets in its checkpoint, which is what Storm's acking achieved by replaying
tuples. Files and Python sources with offsets are; a socket is not.
"""

from __future__ import annotations

import json
import time
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pipeline.components import Fields, Spout, as_fields, ddl_field_names
from pipeline.errors import TopologyError


class _LineSpout(Spout):
    """Text lines, one row per line in the one field ``field`` (the source's ``value``)."""

    def __init__(self, field: str) -> None:
        self.field = field

    @property
    def fields(self) -> Fields:
        return as_fields((self.field,), type(self).__name__)

    def stream(self, spark: SparkSession, parallelism: int) -> DataFrame:
        return self.lines(spark).withColumnRenamed("value", self.field)

    @abstractmethod
    def lines(self, spark: SparkSession) -> DataFrame:
        """The source's streaming frame, its lines in column ``value``."""


class FilesSpout(_LineSpout):
    """Lines of the text files in a folder, one row per line (Spark's file source).

    Spark records which files each micro-batch read in the checkpoint, so a restart
    neither skips nor re-reads a file. Files must appear atomically (write elsewhere,
    then rename into the folder) and must not change once there.
    """

    def __init__(
        self, folder: str | Path, field: str = "line", *, max_files_per_trigger: int | None = None
    ) -> None:
        super().__init__(field)
        self.folder = str(folder)
        self.max_files_per_trigger = max_files_per_trigger

    def lines(self, spark: SparkSession) -> DataFrame:
        reader = spark.readStream.format("text")
        if self.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(self.max_files_per_trigger))
        return reader.load(self.folder)


class RateSpout(Spout):
    """Spark's rate source: ``(timestamp, value)`` rows at a fixed rate, for load tests."""

    def __init__(self, rows_per_second: int = 1, fields: Sequence[str] = ("timestamp", "value")):
        self.rows_per_second = rows_per_second
        self._fields = as_fields(fields, "RateSpout")
        if len(self._fields) != 2:
            raise TopologyError(None, "RateSpout emits two fields (timestamp, value)")

    @property
    def fields(self) -> Fields:
        return self._fields

    def stream(self, spark: SparkSession, parallelism: int) -> DataFrame:
        frame = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", str(self.rows_per_second))
            .option("numPartitions", str(parallelism))
            .load()
        )
        return frame.toDF(*self._fields)


class SocketSpout(_LineSpout):
    """Lines read from a TCP socket. Not replayable: for demos, never exactly-once."""

    replayable: ClassVar[bool] = False

    def __init__(self, host: str, port: int, field: str = "line") -> None:
        super().__init__(field)
        self.host = host
        self.port = port

    def lines(self, spark: SparkSession) -> DataFrame:
        return (
            spark.readStream.format("socket")
            .option("host", self.host)
            .option("port", str(self.port))
            .load()
        )


class PythonSpout(Spout):
    """A spout written in Python: a ``pyspark.sql.datasource.DataSource`` with a stream reader.

    ``fields`` defaults to the source's schema. The module defining the source must reach
    Spark's Python workers; ``pipeline.package`` arranges that for topology packages.
    The reader gets option ``partitions`` set to the spout's parallelism.
    """

    def __init__(
        self,
        source: type[DataSource],
        *,
        options: Mapping[str, Any] | None = None,
        fields: Sequence[str] | None = None,
    ) -> None:
        self.source = source
        self.options = {k: str(v) for k, v in (options or {}).items()}
        if fields is None:
            schema = source(dict(self.options)).schema()
            if isinstance(schema, StructType):
                self._fields = as_fields(schema.fieldNames(), source.name())
            else:
                self._fields = ddl_field_names(schema)
        else:
            self._fields = as_fields(fields, source.name())

    @property
    def fields(self) -> Fields:
        return self._fields

    def stream(self, spark: SparkSession, parallelism: int) -> DataFrame:
        spark.dataSource.register(self.source)
        reader = spark.readStream.format(self.source.name()).option("partitions", str(parallelism))
        return reader.options(**self.options).load().select(*self._fields)


# ------------------------------------------------------------- Python data source helpers


class IndexRange(InputPartition):
    """Records ``[start, end)`` of an indexed source: one Spark task reads one range."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class IndexedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader over records numbered 0, 1, 2, ...: subclass and fill two methods.

    Offsets are ``{"index": n}`` (records before ``n``), so Spark's checkpoint can replay
    any micro-batch exactly if ``read_range`` is a pure function of its range. It
    implements ``SupportsTriggerAvailableNow``: without it, a Python reader under
    ``trigger(availableNow=True)`` silently stops after one chunk on PySpark 4.3.

    Options: ``partitions`` (tasks per micro-batch, set by ``PythonSpout``) and
    ``maxRecordsPerBatch`` (0: no limit).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options over case-insensitively: keys may arrive lower-cased.
        self.options = {k.lower(): v for k, v in options.items()}
        self.partition_count = max(1, int(self.option("partitions", "1")))
        self.max_records = int(self.option("maxRecordsPerBatch", "0"))
        self._target: int | None = None

    def option(self, key: str, default: str) -> str:
        """An option's value, looked up case-insensitively like Spark's own sources do."""
        return self.options.get(key.lower(), default)

    @abstractmethod
    def available(self) -> int:
        """How many records exist now; must never decrease."""

    @abstractmethod
    def read_range(self, start: int, end: int) -> Iterator[tuple[Any, ...]]:
        """Records ``start`` to ``end - 1`` as tuples matching the source's schema."""

    def initialOffset(self) -> dict[str, int]:
        return {"index": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.available()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        begin = int(start["index"])
        newest = self.available() if self._target is None else self._target
        end = max(begin, newest)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {"index": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[IndexRange]:
        lo, hi = int(start["index"]), int(end["index"])
        if hi <= lo:
            return []
        n = min(self.partition_count, hi - lo)
        step, extra = divmod(hi - lo, n)
        ranges, at = [], lo
        for i in range(n):
            size = step + (1 if i < extra else 0)
            ranges.append(IndexRange(at, at + size))
            at += size
        return ranges

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, IndexRange):
            raise TypeError(f"expected an IndexRange partition, got {type(partition).__name__}")
        return self.read_range(partition.start, partition.end)

    def commit(self, end: dict[str, int]) -> None:
        """Spark calls this one micro-batch late on PySpark 4.3; nothing to release here."""


SENTENCES = (
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
)


class _SentenceReader(IndexedStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.sentences = tuple(json.loads(self.option("sentences", json.dumps(SENTENCES))))
        self.total = int(self.option("total", "1000"))
        self.rate = float(self.option("rowsPerSecond", "0"))
        self.started = time.monotonic()
        if self.total < 0 and self.rate <= 0:
            raise ValueError("sentences: an endless source needs rowsPerSecond > 0")

    def available(self) -> int:
        if self.rate <= 0:
            return self.total
        made = int((time.monotonic() - self.started) * self.rate)
        return made if self.total < 0 else min(self.total, made)

    def read_range(self, start: int, end: int) -> Iterator[tuple[Any, ...]]:
        n = len(self.sentences)
        for i in range(start, end):
            yield (self.sentences[i % n],)


class SentenceSource(DataSource):
    """Storm's classic sentence spout: record ``i`` is sentence ``i % len(sentences)``.

    Options: ``total`` records (-1: endless), ``rowsPerSecond`` (0: all at once),
    ``sentences`` (a JSON list). Record contents depend only on the index, so replay after
    a restart yields the same rows.
    """

    @classmethod
    def name(cls) -> str:
        return "nimbus_sentences"

    def schema(self) -> str:
        return "sentence string"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _SentenceReader(self.options)
