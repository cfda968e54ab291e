"""The leader's side of ``PushCode``: send a new package to replicas that lack it.

A submit waits for ``min_replicas`` holders. The followers pull the package as soon as
the leader registers it; if too few have registered after ``push_delay`` (a tenth of the
replication wait, at most 3 s), the leader pushes it to every live replica not yet
registered, in parallel, over its own outbound connections: the path a rule refusing the
other replicas on the leader's port (a NetworkPolicy, ``iptables -j REJECT``) leaves
open. Pulls carry on meanwhile; whichever lands first registers the holder, and a
receiver that already holds the package answers before reading its bytes. A push that
fails is tried again on the submitter's next offer (every ``PUSH_RETRY_S``), unless the
answer says another try cannot help (``FINAL``).

One ``PushRound`` per submit. Each push runs on a thread of its own, bounded by the time
the submit has left; ``close(cancel=True)`` (the submit failed, its folder is being
removed) cancels those still running, ``close(cancel=False)`` lets them finish, so the
other replicas still get the package after the submit was acknowledged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

import grpc

from cluster.api import pb
from code_sync.errors import CodeSyncError
from code_sync.push import PUSH_CHUNK, start_push
from code_sync.store import CodeStore

log = logging.getLogger(__name__)

PUSH_AFTER_MAX_S = 3.0
PUSH_RETRY_S = 2.0
#: Answers another try cannot change: a push the receiver finds malformed (a smaller
#: ``--max-package-mib`` there), a replica without ``PushCode`` (an older version during
#: a rolling upgrade), refused credentials.
FINAL = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)

StartPush = Callable[..., tuple["grpc.Future[pb.PushCodeResponse]", grpc.Channel]]


def push_delay(replication_wait: float) -> float:
    """Seconds a submit leaves the followers to pull before the leader pushes: a pull of
    a package on a LAN takes well under a second, and the rest of the wait stays for the
    push (a tenth of the wait, at most ``PUSH_AFTER_MAX_S``)."""
    return max(0.0, min(replication_wait / 10, PUSH_AFTER_MAX_S))


class PushRound:
    """The pushes of one package for one submit; thread-safe."""

    def __init__(
        self,
        store: CodeStore,
        topology_id: str,
        digest: str,
        *,
        start: StartPush = start_push,
    ) -> None:
        self._store = store
        self._topology_id = topology_id
        self._digest = digest
        self._start = start
        self._lock = threading.Lock()
        self._running: dict[str, grpc.Future[pb.PushCodeResponse] | None] = {}
        self._threads: list[threading.Thread] = []
        #: target -> what its last push came to ("stored", "already held", or the error)
        self.outcomes: dict[str, str] = {}
        self._settled: set[str] = set()  # stored, already held, or refused for good
        self._cancelled = False

    def offer(self, targets: Iterable[str], timeout: float) -> list[str]:
        """Start a push to each of ``targets`` with none running and none settled; returns
        the targets started. ``timeout`` bounds each push."""
        started: list[str] = []
        threads: list[threading.Thread] = []
        with self._lock:
            if self._cancelled:
                return started
            for target in sorted(set(targets)):
                if target in self._running or target in self._settled:
                    continue
                self._running[target] = None
                thread = threading.Thread(
                    target=self._push,
                    args=(target, timeout),
                    name=f"push-{self._topology_id[:40]}",
                    daemon=True,
                )
                threads.append(thread)
                started.append(target)
            self._threads += threads
        for target, thread in zip(started, threads, strict=True):
            log.info("pushing %s (%s) to %s", self._topology_id, self._digest[:12], target)
            thread.start()
        return started

    def close(self, *, cancel: bool) -> None:
        """End the round: cancel the pushes still running, or let them finish."""
        with self._lock:
            if not cancel:
                return
            self._cancelled = True
            running = [f for f in self._running.values() if f is not None]
        for future in running:
            future.cancel()

    def join(self, timeout: float) -> None:
        """Wait for the pushes started so far (tests)."""
        for thread in list(self._threads):
            thread.join(timeout)

    def _push(self, target: str, timeout: float) -> None:
        outcome, final = self._send(target, timeout)
        with self._lock:
            self._running.pop(target, None)
            self.outcomes[target] = outcome
            if final:
                self._settled.add(target)
        level = logging.INFO if final else logging.WARNING
        log.log(level, "push of %s to %s: %s", self._topology_id, target, outcome)

    def _send(self, target: str, timeout: float) -> tuple[str, bool]:
        try:
            header = pb.PushCodeHeader(
                topology_id=self._topology_id,
                digest=self._digest,
                size=self._store.size(self._digest),
            )
            chunks = self._store.read_chunks(self._digest, chunk_size=PUSH_CHUNK)
            future, channel = self._start(target, header, chunks, timeout=timeout)
        except (CodeSyncError, OSError) as e:
            return f"not sent: {e}", False
        try:
            with self._lock:
                cancelled = self._cancelled
                self._running[target] = future
            if cancelled:
                future.cancel()
            try:
                reply = future.result()
            except grpc.FutureCancelledError:
                return "cancelled: the submit ended", True
            except grpc.RpcError as e:
                code = e.code()
                return f"{code.name}: {e.details()}", code in FINAL
            return ("already held" if reply.already_held else "stored"), True
        finally:
            channel.close()
