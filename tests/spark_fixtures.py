"""Spark in tests: one SparkSession for the whole test run (starting one takes about 7 s
here), and ``spark_analysis`` for a test whose code under test starts Spark by itself.

Both carry the ``spark`` tier marker (``tests.tiers``). Supervisors, whose workers run
Spark, come from ``tests.supervisors``. ``./run-tests --fast`` points ``SPARK_HOME`` at
a folder that does not exist, so a test that starts Spark without one of these fixtures
fails there instead of slowing the fast tier.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline.session import make_spark
from tests.tiers import needs


@pytest.fixture(scope="session")
@needs("spark")
def spark() -> Iterator[SparkSession]:
    session = make_spark("local[2]", "nimbus-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
@needs("spark")
def spark_analysis() -> None:
    """Spark resolves the SQL text of the test's packages in a process the code under test
    starts: ``python -m pipeline.check --analyse``, or a leader checking a submitted
    package. Nothing to hand over: asking for it says the test needs Spark."""
