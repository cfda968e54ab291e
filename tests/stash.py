"""Keys under which fixtures leave things on a test item for the report hooks."""

from __future__ import annotations

from typing import Protocol

import pytest


class HasLog(Protocol):
    address: str

    def log_tail(self, lines: int = 30) -> str: ...


#: The replica processes a test started (``tests.replica_fixtures.spawn``).
REPLICAS_KEY = pytest.StashKey[list[HasLog]]()
