"""Whether a term survived a dropped connection: the checks, as one verdict."""

from __future__ import annotations

import enum

from kazoo.client import KazooClient

from cluster.paths import Paths
from fencing.office import read_leader_epoch
from leader.settings import CodeGate


class TermVerdict(enum.Enum):
    """Why a term goes on or ends after a reconnect; the words are for the history."""

    RESUME = "resumed"
    LOST = "session or lock node lost while disconnected; queueing again"
    NOT_NAMED = "leader-epoch no longer names us; queueing again"
    NO_CODE = "waiting for code (after reconnecting)"


def judge_term(
    client: KazooClient,
    paths: Paths,
    *,
    lock_node: str,
    epoch: int,
    session_now: int | None,
    session_then: int | None,
    gate: CodeGate,
) -> TermVerdict:
    """Raises ``KazooException`` on connection trouble: more trouble, not a verdict."""
    if session_now != session_then or not client.exists(lock_node):
        return TermVerdict.LOST
    current, _ = read_leader_epoch(client, paths)
    if current is None or current.epoch != epoch or current.lock_node != lock_node:
        return TermVerdict.NOT_NAMED
    if not gate():
        return TermVerdict.NO_CODE
    return TermVerdict.RESUME
