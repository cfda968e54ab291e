"""A worker's claim on its topology slot: taken before the query starts, watched while it runs.

The claim (see ``fencing.claims``) is the worker's right to run and to publish. It is
taken only when the assignment still names this worker (checked at the version read, in
the same multi-op) and only once any earlier holder's claim is gone, so a reassigned
slot never has two live holders. While the query runs, ``SlotClaim`` answers two
questions from watches and a lease, without a round trip:

- ``publish_refusal()``: may a micro-batch be published now? No as soon as the session is
  not CONNECTED, or no round trip has succeeded for ``lease_fraction`` of the session
  timeout (a worker woken from a pause must not trust what it believed before), or the
  claim is known lost. The commit multi-op checks the claim on the server anyway; this
  only saves evaluating a batch that cannot be published.
- ``stop_reason()``: must the query stop? When the session is LOST, the claim node is
  gone, the assignment moved, the session was SUSPENDED for longer than
  ``suspended_fraction`` of the session timeout, or no round trip succeeded for a whole
  session timeout (woken from a pause: the session is surely gone).

Why a held claim ended is a ``ClaimEnd``, which callers branch on (``moved``, the
retirement of a killed topology's commits on release); the reason strings these two
methods return are for people (logs, the worker's status) and nothing reads them back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from enum import Enum

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import DataWatch

from cluster.api import records
from cluster.paths import Paths
from fencing import WriteOutcomeUnknown, ensure_folders
from fencing.claims import (
    ClaimHeldError,
    ClaimToken,
    StaleAssignmentError,
    release_claim,
    take_claim,
)
from fencing.lease import Heartbeat, Lease
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

Clock = Callable[[], float]

#: Index of the slot whose worker runs a topology's query (see ``pipeline.supervisor``).
RUNNING_INDEX = 0


class ClaimEnd(Enum):
    """Why a held claim ended; the value is the text people read."""

    SESSION_LOST = "ZooKeeper session lost"
    CLAIM_GONE = "claim node gone"
    ASSIGNMENT_REMOVED = "assignment removed"
    ASSIGNMENT_MOVED = "assignment moved"
    ASSIGNMENT_DAMAGED = "assignment damaged"
    COMMIT_REFUSED = "commit refused"

    @property
    def moved(self) -> bool:
        """The assignment no longer names this worker: it ends cleanly, not fenced."""
        return self in (
            ClaimEnd.ASSIGNMENT_REMOVED,
            ClaimEnd.ASSIGNMENT_MOVED,
            ClaimEnd.ASSIGNMENT_DAMAGED,
        )


class NotAssignedError(PipelineError):
    """The assignment no longer names this worker's slot: it must not claim or run."""


class ClaimAbortedError(PipelineError):
    """Asked to stop while waiting for the claim."""


class SlotClaim:
    """Takes, watches and releases one worker's claim (see the module docstring)."""

    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        *,
        topology_id: str,
        supervisor_id: str,
        slot: int,
        host: str,
        session_timeout: float,
        suspended_fraction: float = 0.3,
        lease_fraction: float = 2 / 3,
        clock: Clock = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if not 0 < suspended_fraction <= 1:
            raise ValueError(f"suspended fraction must be in (0, 1], got {suspended_fraction}")
        if not 0 < lease_fraction <= 1:
            raise ValueError(f"lease fraction must be in (0, 1], got {lease_fraction}")
        self.client = client
        self.paths = paths
        self.topology_id = topology_id
        self.supervisor_id = supervisor_id
        self.slot = slot
        self._host = host
        self._timeout = session_timeout
        self._suspended_limit = suspended_fraction * session_timeout
        self._clock = clock
        self._wall_ms = wall_ms
        self._lease = Lease(lease_fraction * session_timeout, clock=clock)
        self._pinger = Heartbeat(
            client,
            self._lease,
            path=paths.claims_of(topology_id),
            interval=max(0.05, session_timeout / 10),
            clock=clock,
        )
        self._lock = threading.Lock()
        self._suspended_since: float | None = None
        self._ended: ClaimEnd | None = None
        self._lost: str | None = None  # why, for people: the end's text and any detail
        self.token: ClaimToken | None = None
        self.czxid = 0
        self.claim_path = paths.claim(topology_id, RUNNING_INDEX)

    # -- taking the claim ----------------------------------------------------------------

    def acquire(self, stop: threading.Event, *, poll: float = 0.5) -> ClaimToken:
        """Wait until the slot is free, then claim it; the assignment must name us throughout.

        Raises ``NotAssignedError`` when the assignment moves away meanwhile and
        ``ClaimAbortedError`` when ``stop`` is set.
        """
        ensure_folders(
            self.client,
            [self.paths.claims_of(self.topology_id), self.paths.commits_of(self.topology_id)],
        )
        waited = False
        while True:
            if stop.is_set():
                raise ClaimAbortedError(f"{self.topology_id}: stopped while waiting for the claim")
            version = self._read_assignment()
            record = records.WorkerClaim(
                topology_id=self.topology_id,
                index=RUNNING_INDEX,
                supervisor_id=self.supervisor_id,
                slot=self.slot,
                host=self._host,
                pid=os.getpid(),
                assignment_version=version,
                claimed_ms=self._wall_ms(),
            ).SerializeToString(deterministic=True)
            try:
                token = take_claim(
                    self.client,
                    assignment_path=self.paths.assignment(self.topology_id),
                    assignment_version=version,
                    epoch_path=self.paths.claims_of(self.topology_id),
                    claim_path=self.claim_path,
                    record=record,
                    timeout=self._timeout,
                )
            except StaleAssignmentError:
                continue
            except ClaimHeldError:
                if not waited:
                    log.info("%s: waiting for the previous holder's claim to go", self.claim_path)
                    waited = True
                self._wait_gone(stop, poll)
                continue
            except WriteOutcomeUnknown:
                found = self._read_back()
                if found is None:
                    continue
                token = found
            return self._hold(token)

    def _read_assignment(self) -> int:
        path = self.paths.assignment(self.topology_id)
        try:
            data, stat = self.client.get(path)
        except NoNodeError as e:
            raise NotAssignedError(f"{self.topology_id}: no assignment") from e
        try:
            assignment = records.Assignment.FromString(data)
        except DecodeError as e:
            raise NotAssignedError(f"{self.topology_id}: the assignment does not parse") from e
        if not self._names_us(assignment):
            raise NotAssignedError(
                f"{self.topology_id}: slot {RUNNING_INDEX} is no longer "
                f"{self.supervisor_id}-{self.slot}"
            )
        return int(stat.version)

    def _names_us(self, assignment: records.Assignment) -> bool:
        if len(assignment.slots) <= RUNNING_INDEX:
            return False
        first = assignment.slots[RUNNING_INDEX]
        return (first.supervisor_id, first.slot) == (self.supervisor_id, self.slot)

    def _wait_gone(self, stop: threading.Event, poll: float) -> None:
        gone = threading.Event()

        def on_event(event: WatchedEvent) -> None:
            gone.set()

        if self.client.exists(self.claim_path, watch=on_event) is None:
            return
        while not gone.wait(poll) and not stop.is_set():
            self._read_assignment()  # raises once the slot moved away meanwhile

    def _read_back(self) -> ClaimToken | None:
        """After an unknown outcome: the claim is ours if its node belongs to our session."""
        stat = self.client.exists(self.claim_path)
        client_id = self.client.client_id
        if stat is None or not client_id or stat.ephemeralOwner != client_id[0]:
            return None
        # Every claim bumps the epoch and creates the node; the node is ours, so the
        # epoch's current version is the one our claim set.
        epoch = self.client.exists(self.paths.claims_of(self.topology_id))
        if epoch is None:
            return None
        return ClaimToken(self.claim_path, self.paths.claims_of(self.topology_id), epoch.version)

    def _hold(self, token: ClaimToken) -> ClaimToken:
        started = self._clock()
        stat = self.client.exists(self.claim_path)
        self._lease.renew(started)
        self.czxid = int(stat.czxid) if stat is not None else 0
        self.token = token
        self.client.add_listener(self._on_state)
        DataWatch(self.client, self.claim_path, self._on_claim)
        DataWatch(self.client, self.paths.assignment(self.topology_id), self._on_assignment)
        self._pinger.start()
        log.info(
            "claimed %s: epoch %d, czxid %d, pid %d",
            self.claim_path,
            token.epoch,
            self.czxid,
            os.getpid(),
        )
        return token

    # -- while holding it (watch callbacks run on kazoo's thread: record, never block) ----

    def _on_state(self, state: str) -> None:
        with self._lock:
            if state == KazooState.SUSPENDED:
                if self._suspended_since is None:
                    self._suspended_since = self._clock()
                    log.warning("%s: connection SUSPENDED: claim at risk", self.claim_path)
            elif state == KazooState.LOST:
                self._lose(ClaimEnd.SESSION_LOST)
            else:
                self._suspended_since = None

    def _on_claim(self, data: bytes | None, stat: ZnodeStat | None) -> bool | None:
        if stat is None or (self.czxid and int(stat.czxid) != self.czxid):
            with self._lock:
                self._lose(ClaimEnd.CLAIM_GONE)
            return False
        return None

    def _on_assignment(self, data: bytes | None, stat: ZnodeStat | None) -> bool | None:
        end: ClaimEnd | None = None
        if data is None:
            end = ClaimEnd.ASSIGNMENT_REMOVED
        else:
            try:
                if not self._names_us(records.Assignment.FromString(data)):
                    end = ClaimEnd.ASSIGNMENT_MOVED
            except DecodeError:
                end = ClaimEnd.ASSIGNMENT_DAMAGED
        if end is None:
            return None
        with self._lock:
            self._lose(end)
        return False

    def _lose(self, end: ClaimEnd, detail: str = "") -> None:
        if self._ended is None:
            self._ended = end
            self._lost = f"{end.value}: {detail}" if detail else end.value
            log.warning("%s: %s; publishing nothing more", self.claim_path, self._lost)

    def mark_lost(self, end: ClaimEnd, detail: str = "") -> None:
        """Called when a commit was refused: the server said the claim is gone."""
        with self._lock:
            self._lose(end, detail)

    @property
    def ended(self) -> ClaimEnd | None:
        """Why the claim ended, or None while it holds."""
        return self._ended

    @property
    def moved(self) -> bool:
        """True when the claim ended because the assignment no longer names us."""
        return self._ended is not None and self._ended.moved

    def publish_refusal(self) -> str | None:
        """Why no batch may be published now, or None when it may (no round trip)."""
        with self._lock:
            if self.token is None:
                return "no claim held"
            if self._lost is not None:
                return self._lost
        if self.client.state != KazooState.CONNECTED:
            return f"ZooKeeper connection {self.client.state}"
        if not self._lease.valid():
            return f"no word from ZooKeeper for {self._lease.age():.1f}s"
        return None

    def stop_reason(self) -> str | None:
        """Why the query must stop now, or None while it may keep running."""
        with self._lock:
            if self._lost is not None:
                return self._lost
            since = self._suspended_since
        now = self._clock()
        if since is not None and now - since > self._suspended_limit:
            return f"ZooKeeper connection suspended for {now - since:.1f}s"
        if self._lease.age() > self._timeout:
            return f"no word from ZooKeeper for {self._lease.age():.1f}s: the session is gone"
        return None

    def _retired_nodes(self) -> list[str]:
        """A killed topology's commit markers and their folder.

        Never the claim folder: its version is the claim epoch, which must only grow.
        """
        commits = self.paths.commits_of(self.topology_id)
        try:
            return [
                *(f"{commits}/{name}" for name in self.client.get_children(commits)),
                commits,
            ]
        except NoNodeError:
            return []

    def release(self) -> None:
        """Give the claim up (the next holder need not wait for our session to expire)."""
        self._pinger.stop()
        token = self.token
        if token is None:
            return
        try:
            if self._ended is ClaimEnd.ASSIGNMENT_REMOVED and release_claim(
                self.client, token, timeout=self._timeout, retire=self._retired_nodes()
            ):
                log.info("released %s and removed the killed topology's commits", self.claim_path)
            elif release_claim(self.client, token, timeout=self._timeout):
                log.info("released %s (epoch %d)", self.claim_path, token.epoch)
        except (WriteOutcomeUnknown, KazooException) as e:
            log.info("could not release %s (its session's end will): %s", self.claim_path, e)
