"""Shared pytest setup. Fixtures live in plugin modules; add yours to this list."""

pytest_plugins = ["tests.zk_fixtures", "tests.replica_fixtures", "tests.spark_fixtures"]
