"""Shared pytest setup. Fixtures live in plugin modules; add yours to this list.

A failing test that started replica processes gets the tail of each one's log in its
report (``replica_logs``), so a failure on CI can be diagnosed without a re-run.

Each test gets the tier markers of the fixtures it uses (``tests.tiers``), which is what
``./run-tests --fast`` selects on.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.stash import REPLICAS_KEY
from tests.tiers import markers_of

pytest_plugins = [
    "tests.zk_fixtures",
    "tests.replica_fixtures",
    "tests.spark_fixtures",
    "tests.supervisors",
    "tests.root_fixtures",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(markers_of(item)):
            item.add_marker(marker)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for replica in item.stash.get(REPLICAS_KEY, []):
            report.sections.append((f"replica {replica.address} log", replica.log_tail(60)))
    return report
