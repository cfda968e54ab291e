"""A term taken in the silence preemption's own multi-op, handed from the silence watch
(``leader.silence_watch``, which writes it) to the elector (``leader.term``, which serves it).

On a slow disk every write waits about two fsyncs; deleting the silent holder's lock node and
then taking office were two writes in a row (3.6 s at 0.9 s per fsync). When the silent node
is the term's holder at the head of the queue and we are next with all the code, one
multi-op does both (``fencing.beats.preempt_into_office``; SPIN: ``model/election.pml``,
``PLANT_FOLD_ANY_TARGET``). The silence watch calls ``begin`` before it sends the multi-op:
kazoo's lock recipe may see the node ahead go (a watch event, which ZooKeeper sends before
the reply) before the silence watch has the reply, and the elector must wait for that
outcome rather than take office a second time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Draft:
    """What the take-office part needs from the elector: our lock node, and the term's first
    beat (its send time, the claim it announces, its data, whether the node exists)."""

    lock_node: str
    sent: float
    lease: float
    beat: bytes
    beat_exists: bool


@dataclass(frozen=True)
class FoldedOffice:
    """A term the preemption's multi-op began for ``lock_node``."""

    lock_node: str
    epoch: int
    sent: float
    lease: float


class Fold:
    """One slot, thread-safe: ``begin`` and ``end`` from the silence watch, ``take`` from the
    elector. A fold that failed (or whose outcome is unknown) leaves nothing: the elector
    then takes office itself, and its multi-op checks everything afresh."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._cond = threading.Condition()
        self._clock = clock
        self._pending: str | None = None  # the lock node a multi-op in flight is for
        self._office: FoldedOffice | None = None

    def begin(self, lock_node: str) -> None:
        with self._cond:
            self._pending, self._office = lock_node, None

    def end(self, office: FoldedOffice | None) -> None:
        with self._cond:
            self._pending, self._office = None, office
            self._cond.notify_all()

    def busy(self, lock_node: str) -> bool:
        """A multi-op in flight, or a term begun, for ``lock_node`` (not waiting)."""
        with self._cond:
            office = self._office
            return self._pending == lock_node or (
                office is not None and office.lock_node == lock_node
            )

    def taken(self, lock_node: str, timeout: float) -> bool:
        """Whether a term was begun for ``lock_node`` (waiting up to ``timeout`` while its
        multi-op is in flight), without taking it: the lock recipe, woken by the deletion
        (ZooKeeper sends the event before the reply), need not list the queue then."""
        deadline = self._clock() + timeout
        with self._cond:
            while self._pending == lock_node and self._clock() < deadline:
                self._cond.wait(max(0.0, deadline - self._clock()))
            return self._office is not None and self._office.lock_node == lock_node

    def take(self, lock_node: str, timeout: float) -> FoldedOffice | None:
        """The term begun for ``lock_node``, once (waiting up to ``timeout`` while its
        multi-op is in flight); None when there is none."""
        deadline = self._clock() + timeout
        with self._cond:
            while self._pending == lock_node and self._clock() < deadline:
                self._cond.wait(max(0.0, deadline - self._clock()))
            office, self._office = self._office, None
        return office if office is not None and office.lock_node == lock_node else None
