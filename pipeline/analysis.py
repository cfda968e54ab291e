"""Resolve a topology's SQL expressions with Spark's analyzer before the topology is accepted.

``validate`` knows fields by name only, so ``Where("uper(word) = 'A'")`` or
``Select(x="nosuch + 1")`` passes it and would fail later, in a worker, with Spark's
``[UNRESOLVED_ROUTINE]`` or ``[UNRESOLVED_COLUMN...]``. Here every spout becomes an
empty *static* DataFrame of its declared columns (``static_schema``), and each bolt's
step is built on its inputs exactly as the compiler builds it (``bolt_frame``: the same
streams, joins and unions, the same error text, the same declared-columns check). Spark
analyses a DataFrame when it is built, so a wrong expression fails at once; nothing is
read and no job runs.

Spark is needed only for bolts that take SQL text (``needs_analysis``: ``Where``,
``Select``, ``Window``'s aggregates, ``Branch``'s predicates): a JVM costs about 7 s and
512 MiB, which a plain word count must not pay.

Column types come from the spout. Built-in spouts have known types; for any other spout
every declared field is taken as a string, a guess, so downstream of such a spout only
errors that no column type could cure (an unknown name, bad syntax, a wrong argument
count) refuse the topology; a type error there ends the analysis of that branch.

The check runs user code under rlimits (``pipeline.check``), and a JVM cannot start
under ``RLIMIT_AS``: start ``analysis_session`` before confining the process. The JVM
is then outside those limits, bounded by its own heap (512 MiB) and by the caller's
wall clock. Leaving the session waits for the JVM to exit, so nothing it prints can
follow the caller's verdict and no JVM outlives the check.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import subprocess
from collections.abc import Iterator

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from pipeline.bolts import Select, Where
from pipeline.compiler import _spark_step, bolt_frame, subscribed, validate
from pipeline.components import Bolt, Sink, Spout
from pipeline.errors import PipelineError, TopologyError
from pipeline.graph import Topology
from pipeline.session import make_spark
from pipeline.spouts import FilesSpout, PythonSpout, RateSpout, SocketSpout
from pipeline.streams import Branch
from pipeline.windows import Window

#: Bolts whose user-written SQL text only Spark can resolve; add new ones here.
SQL_TEXT_BOLTS: tuple[type[Bolt], ...] = (Where, Select, Window, Branch)
#: Spouts whose column types ``static_schema`` knows; any other's are guessed (strings).
TYPED_SPOUTS: tuple[type[Spout], ...] = (FilesSpout, RateSpout, SocketSpout, PythonSpout)
#: Error conditions that hold whatever the column types (names, syntax, arity).
TYPE_FREE_CONDITIONS = ("UNRESOLVED_", "PARSE_", "WRONG_NUM_ARGS")
#: A short-lived JVM that only analyses: the C1 compiler alone and the serial collector
#: cut its start from about 12 to 7 s on a loaded 2-core machine here.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: How long leaving ``analysis_session`` waits for the JVM to exit before killing it.
JVM_EXIT_WAIT_S = 20.0


class AnalysisUnavailable(PipelineError):
    """Spark could not be started, so the SQL expressions could not be resolved."""


def needs_analysis(topology: Topology) -> bool:
    """Whether any bolt carries SQL text that only Spark can resolve."""
    return any(isinstance(spec.component, SQL_TEXT_BOLTS) for spec in topology)


def static_schema(spout: Spout) -> StructType | str:
    """The columns a spout's stream has, for an empty static frame standing in for it.

    A ``PythonSpout`` gives its data source's own schema (a DDL string or a StructType),
    of which its stream selects the declared fields, as ``PythonSpout.stream`` does.
    """
    if isinstance(spout, PythonSpout):
        return spout.source(dict(spout.options)).schema()
    if isinstance(spout, RateSpout):
        stamp, value = spout.fields
        return StructType([StructField(stamp, TimestampType()), StructField(value, LongType())])
    # FilesSpout, SocketSpout: one line of text; any other spout: a guess (see above).
    return StructType([StructField(name, StringType()) for name in spout.fields])


def static_frame(spark: SparkSession, spout: Spout) -> DataFrame:
    """An empty static DataFrame with the columns (and, when known, types) of the spout's."""
    frame = spark.createDataFrame([], static_schema(spout))
    return frame.select(*spout.fields) if isinstance(spout, PythonSpout) else frame


def analyse(topology: Topology, spark: SparkSession) -> None:
    """Build every spout's and bolt's frame on static stand-ins; raise ``TopologyError``
    naming the first component Spark refuses (``"Spark refused it: [CONDITION] ..."``)."""
    plan = validate(topology)
    frames: dict[str, DataFrame] = {}
    guessed: set[str] = set()  # components whose input types are guesses
    for name in plan.order:
        spec = topology[name]
        comp = spec.component
        if isinstance(comp, Sink):
            continue
        if isinstance(comp, Spout):
            if not isinstance(comp, TYPED_SPOUTS):
                guessed.add(name)
            frames[name] = _spark_step(spec, plan, functools.partial(static_frame, spark, comp))
            continue
        if any(g.source not in frames for g in spec.inputs):
            continue  # downstream of a step whose analysis ended
        if any(g.source in guessed for g in spec.inputs):
            guessed.add(name)
        inputs = [subscribed(frames[g.source], g) for g in spec.inputs]
        try:
            frames[name] = bolt_frame(spec, plan, inputs)
        except TopologyError as e:
            if name in guessed and not _type_free(e.__cause__):
                continue  # a type error on guessed types proves nothing
            raise


def _type_free(cause: BaseException | None) -> bool:
    if not isinstance(cause, PySparkException):
        return True  # not Spark's analysis: the component's own error
    condition = cause.getCondition() or ""
    return condition.startswith(TYPE_FREE_CONDITIONS)


@contextlib.contextmanager
def analysis_session() -> Iterator[SparkSession]:
    """A small local session for analysis only; on leaving, its JVM has exited.

    Bound to the loopback address (it serves nobody). PySpark logs every analysis error
    with the JVM's whole stack; those loggers are silenced, as the refusal says it all.
    """
    from pyspark.logger import PySparkLogger

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    try:
        spark = make_spark(
            "local[1]",
            "nimbus-check",
            shuffle_partitions=1,
            driver_memory="512m",
            conf={
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.extraJavaOptions": JVM_OPTIONS,
            },
        )
    except Exception as e:
        raise AnalysisUnavailable(f"Spark could not start to resolve SQL expressions: {e}") from e
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    try:
        yield spark
    finally:
        _stop(spark)


def _stop(spark: SparkSession) -> None:
    """Stop the session and wait for its JVM: closing its stdin is PySpark's exit signal."""
    gateway = spark.sparkContext._gateway
    # Set by pyspark.java_gateway.launch_gateway; not part of py4j's typed surface.
    jvm: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        spark.stop()
    if jvm is None:
        return  # a JVM this process did not start (PYSPARK_GATEWAY_PORT): not ours to end
    with contextlib.suppress(OSError):
        if jvm.stdin is not None:
            jvm.stdin.close()
    try:
        jvm.wait(timeout=JVM_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()
