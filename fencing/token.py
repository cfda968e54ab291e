"""The leadership token: one per term, cancelled once and never revived."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable


class CancelReason(enum.Enum):
    """Why a term ended: what the elector decides on. The words are for people."""

    #: The connection dropped (SUSPENDED or LOST). The session may survive, and with it
    #: the lock node: the only reason a term can resume.
    DISCONNECTED = "ZooKeeper connection lost"
    #: The lock node is gone (deleted, or its session expired).
    LOCK_NODE_DELETED = "own lock node deleted"
    #: A fenced write found the lock node gone or the session expired.
    WRITE_REFUSED = "fenced write refused"
    #: The lock node could not be watched for a reason other than the connection.
    WATCH_FAILED = "could not watch own lock node"
    #: The elector met an error it did not expect; it ends the term and queues again.
    ELECTOR_ERROR = "elector error"
    #: This replica is stopping.
    SHUTDOWN = "shutdown"
    #: The leader handed its term to another replica (``nimbus handover``): it leaves the
    #: lock at once and queues again.
    HANDOVER = "handed over"

    @property
    def resumable(self) -> bool:
        """True when the term may go on after the connection is back (same session)."""
        return self is CancelReason.DISCONNECTED


CancelCallback = Callable[["CancelReason"], None]


class LeadershipToken:
    """Proof of a term: the holder's lock node, its epoch, and a one-shot cancellation.

    Leader-only work runs while the token is alive and stops when it is cancelled. A
    cancelled token stays cancelled; a resumed or new term gets a new token, so stale
    work holding an old token can never write again.
    """

    def __init__(self, lock_node: str, epoch: int) -> None:
        if not lock_node.startswith("/"):
            raise ValueError(f"lock node must be an absolute path, got {lock_node!r}")
        if epoch < 1:
            raise ValueError(f"epoch must be >= 1, got {epoch}")
        self.lock_node = lock_node
        self.epoch = epoch
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: CancelReason | None = None
        self._detail = ""
        self._callbacks: list[CancelCallback] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> CancelReason | None:
        """Why the token was cancelled (None while alive)."""
        return self._reason

    @property
    def why(self) -> str:
        """The reason and its detail in words, for logs and errors ("" while alive)."""
        if self._reason is None:
            return ""
        return f"{self._reason.value}: {self._detail}" if self._detail else self._reason.value

    def cancel(self, reason: CancelReason, detail: str = "") -> bool:
        """Cancel once; returns True only for the call that cancelled it."""
        with self._lock:
            if self._event.is_set():
                return False
            self._reason = reason
            self._detail = detail
            self._event.set()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback(reason)
        return True

    def on_cancel(self, callback: CancelCallback) -> None:
        """Run ``callback(reason)`` at cancellation (at once if already cancelled)."""
        with self._lock:
            reason = self._reason
            if reason is None:
                self._callbacks.append(callback)
                return
        callback(reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout``; True when cancelled."""
        return self._event.wait(timeout)

    def __repr__(self) -> str:
        state = f"cancelled: {self.why}" if self.cancelled else "alive"
        return f"LeadershipToken(epoch={self.epoch}, lock_node={self.lock_node!r}, {state})"
