"""The leadership token: one per term, cancelled once and never revived."""

from __future__ import annotations

import threading
from collections.abc import Callable

CancelCallback = Callable[[str], None]


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
        self._reason: str | None = None
        self._callbacks: list[CancelCallback] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """Why the token was cancelled, in words (None while alive)."""
        return self._reason

    def cancel(self, reason: str) -> bool:
        """Cancel once; returns True only for the call that cancelled it."""
        with self._lock:
            if self._event.is_set():
                return False
            self._reason = reason
            self._event.set()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback(reason)
        return True

    def on_cancel(self, callback: CancelCallback) -> None:
        """Run ``callback(reason)`` at cancellation (at once if already cancelled)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
            reason = self._reason or ""
        callback(reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout``; True when cancelled."""
        return self._event.wait(timeout)

    def __repr__(self) -> str:
        state = f"cancelled: {self._reason}" if self.cancelled else "alive"
        return f"LeadershipToken(epoch={self.epoch}, lock_node={self.lock_node!r}, {state})"
