"""``Paths`` alone names and recognises lock nodes (``tests/test_layers.py`` keeps it so)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cluster.paths import Paths

PATHS = Paths("/storm")


@dataclass
class FakeLock:
    """What kazoo's ``Lock`` shows: its folder and its node's name (None until queued)."""

    path: str
    node: str | None


def test_a_queued_lock_names_its_node_and_an_unqueued_one_none() -> None:
    name = "0f3a__lock__0000000007"
    assert PATHS.lock_node_of(FakeLock(PATHS.leader_lock, name)) == PATHS.lock_node(name)
    assert PATHS.lock_node_of(FakeLock(PATHS.leader_lock, None)) is None
    assert PATHS.lock_node_of(FakeLock(PATHS.leader_lock, "")) is None


def test_a_lock_of_another_folder_is_refused() -> None:
    with pytest.raises(ValueError, match="not on the lock queue"):
        PATHS.lock_node_of(FakeLock("/other/leader-lock", "x__lock__0000000001"))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/storm/leader-lock/x__lock__0000000001", True),
        ("/storm/leader-lock/", False),
        ("/storm/leader-lock", False),
        ("/storm/leader-lock/a/b", False),
        ("/storm/leader-lockx/y", False),
        ("/other/leader-lock/x__lock__0000000001", False),
        ("x__lock__0000000001", False),
    ],
)
def test_only_a_child_of_the_lock_folder_is_a_lock_node(path: str, expected: bool) -> None:
    assert PATHS.is_lock_node(path) is expected
