"""Test tiers: what a test uses decides its markers; no list of test names is kept.

A fixture that brings up something heavy or privileged says so with ``@needs(...)`` under
its ``@pytest.fixture``. ``tests/conftest.py`` gives every collected test the markers of
every fixture it uses, directly or through other fixtures, so a new test that asks for
replicas, a Spark session, a supervisor or a kernel-fault cluster lands in its tier
without anyone remembering to mark it. The fast tier (``./run-tests --fast``) deselects
every marker of ``HEAVY``; docs/testing-tiers.md gives the tiers' commands and times.

A tool a test could reach without a fixture (a kernel fault, a mount, a supervisor whose
worker starts Spark) is handed over by one that carries the marker, so the marker cannot
be forgotten at a call site. Where the code under test starts Spark by itself, the test
asks for ``spark_analysis``; ``./run-tests --fast`` has no Spark to start, so a test that
misses it fails there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

#: The markers a fixture may declare. pyproject.toml registers them, each with what it
#: stands for; tests/test_tiers.py checks that it does and that the fast tier leaves out
#: every one.
HEAVY = frozenset(
    {"replicas", "ensemble", "spark", "root", "containers", "browser", "model", "slow", "soak"}
)

_ATTR = "_nimbus_test_needs"
F = TypeVar("F", bound=Callable[..., object])


def needs(*markers: str) -> Callable[[F], F]:
    """Declare the tiers of a fixture: every test that uses it gets these markers. Put it
    under ``@pytest.fixture`` (pytest copies the function's attributes onto the fixture)."""
    unknown = set(markers) - HEAVY
    if unknown:
        raise ValueError(f"unknown tier markers {sorted(unknown)}; known: {sorted(HEAVY)}")

    def declare(fixture: F) -> F:
        setattr(fixture, _ATTR, (*getattr(fixture, _ATTR, ()), *markers))
        return fixture

    return declare


def markers_of(item: pytest.Item) -> set[str]:
    """The tier markers the fixtures ``item`` uses declare (the ones pytest resolved for
    this test, so two fixtures of one name in different modules are told apart)."""
    if not isinstance(item, pytest.Function):
        return set()
    found: set[str] = set()
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        # The last definition applies; one it overrides runs only if it asks for its
        # own name (pytest lists the overridden ones first).
        for definition in reversed(definitions):
            found.update(getattr(definition.func, _ATTR, ()))
            if name not in definition.argnames:
                break
    return found
