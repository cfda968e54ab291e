"""The take-office multi-op sent from kazoo's event thread as the node ahead's deletion
arrives (``leader.read_ahead``'s ``SendOffice``), before the elector's thread wakes.

A planned handover was the old leader's delete, then on our side a thread hop (kazoo's
event thread wakes the elector's), the lock recipe's bookkeeping, the code gate, the
step-aside check and the take-office decision, and only then the multi-op: measured in
``bench/peers.py``, about a millisecond of the five between the SIGTERM and the new term.
The decision is the elector's own, from the same reads (``WinnerReads``, answered before
the deletion and unchanged up to it) and the same callbacks; only the thread differs. The
elector collects the reply (``leader.term``) and, after a conflict, decides again from
fresh reads as ``take_office`` does.

Not while stopping, nor while the silence watch's preemption takes office for this lock
node in its own multi-op (``leader.fold``): its deletion of the node ahead arrives first.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from fencing.office import send_office
from leader.fold import Fold
from leader.pulse import Pulse
from leader.read_ahead import DecidedAhead, WinnerReads
from leader.settings import ElectorCallbacks, ElectorSettings

log = logging.getLogger(__name__)


class OfficeAhead:
    """``send`` is a ``SendOffice``: kazoo's event thread calls it and it never raises."""

    def __init__(
        self,
        client: KazooClient,
        settings: ElectorSettings,
        callbacks: ElectorCallbacks,
        *,
        pulse: Pulse,
        fold: Fold,
        stopping: threading.Event,
        step_aside: Callable[[WinnerReads], str | None],
        wall_ms: Callable[[], int],
    ) -> None:
        self._client, self._s, self._do = client, settings, callbacks
        self._pulse, self._fold, self._stopping = pulse, fold, stopping
        self._step_aside, self._wall_ms = step_aside, wall_ms

    def send(self, lock_node: str, reads: WinnerReads) -> DecidedAhead | None:
        """Our take-office multi-op, sent, or a step aside; None to leave the decision to
        the elector's thread (it asks again: the gate's answer is the same, or it waits)."""
        try:
            return self._send(lock_node, reads)
        except KazooException as e:  # a read failed (the link dropped): the elector's turn
            log.info("%s: no take-office at the deletion: %r", self._s.replica_id, e)
            return None
        except Exception:  # the elector takes office itself; kazoo's thread must go on
            log.exception("%s: could not take office at the deletion", self._s.replica_id)
            return None

    def _send(self, lock_node: str, reads: WinnerReads) -> DecidedAhead | None:
        gate = self._do.gate_given
        if self._stopping.is_set() or gate is None or self._fold.busy(lock_node):
            return None
        if not gate(reads.storms):
            return None  # the elector asks again, and waits for code
        aside = self._step_aside(reads)
        if aside is not None:
            return DecidedAhead(None, aside=aside)
        sent, lease, beat = self._pulse.announce()
        attempt = send_office(
            self._client, self._s.paths, reads.office, lock_node=lock_node,
            holder=self._s.replica_id, now_ms=self._wall_ms, beat=self._s.paths.beat(lock_node),
            beat_data=beat, beat_exists=self._pulse.beat_made(lock_node),
        )  # fmt: skip
        return DecidedAhead(attempt, sent, lease)
