"""A SparkSession sized for this project's machines and safe to stop mid-stream.

State lives in RocksDB, so a rebalance can change a stateful step's partitions.

``-Xss16m`` for the driver JVM: on PySpark 4.3 here, ``query.stop()`` during a Python
``foreachBatch`` logged a ``StackOverflowError`` in the stream thread (once losing that
batch's output silently); the larger thread stack removed it. The setting only takes
effect when this call starts the JVM, so make the session here before anything else does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

DRIVER_JAVA_OPTIONS = "-Xss16m"
#: RocksDB keeps state off the JVM heap and is the provider Spark can repartition
#: offline (``pipeline.state_partitions``); the default HDFS-backed one cannot.
STATE_STORE_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def make_spark(
    master: str = "local[2]",
    app_name: str = "nimbus-pipeline",
    *,
    python_path: Sequence[str | Path] = (),
    shuffle_partitions: int = 2,
    driver_memory: str = "1g",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or return the running) SparkSession for pipelines.

    ``python_path`` folders are put on the driver's ``sys.path`` and in
    ``spark.executorEnv.PYTHONPATH``: modules defining sources or bolts must reach Spark's
    Python workers, and ``sc.addPyFile`` was not enough on this machine. Workers use this
    interpreter, so they see the same installed packages as the driver.
    """
    paths = [str(Path(p).resolve()) for p in python_path]
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    executor_path = os.pathsep.join(dict.fromkeys([*paths, *inherited]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
        .config("spark.driver.memory", driver_memory)
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.providerClass", STATE_STORE_PROVIDER)
    )
    if executor_path:
        builder = builder.config("spark.executorEnv.PYTHONPATH", executor_path)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
