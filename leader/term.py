"""A term's checks: whether it survived a dropped connection (one verdict), the watch
on its lock node, and leaving the queue within a deadline."""

from __future__ import annotations

import enum
import logging

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.recipe.lock import Lock

from cluster.paths import Paths
from fencing import CancelReason, FencingError, LeadershipToken
from fencing.beats import leave_queue
from fencing.office import read_leader_epoch
from leader.settings import CodeGate

log = logging.getLogger(__name__)


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


def watch_lock_node(client: KazooClient, token: LeadershipToken) -> None:
    """Cancel ``token`` when its lock node goes (re-armed after every other event)."""

    def watch(event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            token.cancel(CancelReason.LOCK_NODE_DELETED)
        elif not token.cancelled and event.type != EventType.NONE:
            watch_lock_node(client, token)

    try:
        if client.exists(token.lock_node, watch=watch) is None:
            token.cancel(CancelReason.LOCK_NODE_DELETED)
    except ConnectionLoss:
        # Connection trouble, not an ended term: end it as a disconnect does, so the
        # term can resume once the session proves intact.
        token.cancel(CancelReason.DISCONNECTED, "while watching own lock node")
    except KazooException as e:
        token.cancel(CancelReason.WATCH_FAILED, type(e).__name__)


def leave_lock(client: KazooClient, paths: Paths, lock: Lock, *, timeout: float) -> None:
    """Delete our lock node within ``timeout`` and forget it; also drops a lock whose node
    is already gone (kazoo would keep believing it holds it). Not kazoo's ``release``: it
    retries without bound while the link is down, and SIGTERM would hang on it."""
    node = paths.lock_node_of(lock)
    if node is not None and client.state == KazooState.CONNECTED:
        try:
            leave_queue(client, lock_node=node, timeout=timeout)
        except (KazooException, FencingError) as e:
            # The session's end removes the node, and a later cycle drops it if the
            # session survives (``Membership.drop_session_nodes``).
            log.warning("could not release lock node %s: %s", node, e)
    elif node is not None:
        log.info("not connected: leaving lock node %s to the session", node)
    lock.is_acquired = False
    lock.node = None
