"""Shared test fixtures."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession (local[2]) for the whole test run: start-up costs ~10 s, so it is paid once."""
    session = build_session("local[2]", "interchange-tests", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
