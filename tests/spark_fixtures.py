"""One SparkSession for the whole test run: starting one takes about 7 s here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline.session import make_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = make_spark("local[2]", "nimbus-tests", shuffle_partitions=2)
    yield session
    session.stop()
