"""The supervisor: one per worker host, keeps the slots the leader assigned to it.

It registers its ephemeral ``/supervisors/<id>`` (again on every new session), follows
``/assignments`` by watches, and every heartbeat interval writes, with one wall-clock
time, its own ``SupervisorInfo`` (``heartbeat_ms``, ``slots_used``) and a
``WorkerHeartbeat`` at ``/workerbeats/<topology-id>/<id>-<slot>`` for each slot assigned
to it, removing those of slots it no longer holds. It needs no Nimbus: assignments stay
served while no leader is up. No worker process runs yet (the pipelines issue adds the
Spark runtime), and each heartbeat's status says so. All writes go through
``fencing.Membership``, which only touches this supervisor's own nodes.

Run it with ``nimbus supervisor`` or ``python -m pipeline.supervisor`` (same flags).
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from fencing import FencingError, Membership, ensure_folders
from leader.paths import Paths, parse_worker_name, worker_name
from nimbus import __version__
from nimbus.api import records
from nimbus.errors import ConfigError, ZooKeeperUnavailableError
from nimbus.factory import make_kazoo_client

log = logging.getLogger(__name__)

#: Heartbeat status while no worker runtime exists: the slot is held, nothing runs in it.
NO_RUNTIME = "assigned: no pipeline runtime yet"

_ROOT_RE = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
_ID_RE = re.compile(r"^[A-Za-z0-9._:-]+$")


@dataclass(frozen=True)
class SupervisorConfig:
    """Validated at construction, so a bad flag fails before anything connects."""

    zookeeper: str
    supervisor_id: str
    root: str = "/storm"
    slots: int = 4
    heartbeat_interval: float = 1.0
    session_timeout: float = 10.0
    host: str = ""  # what SlotAssignment.host says; "" -> this machine's FQDN
    connect_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.zookeeper.strip():
            raise ConfigError("--zookeeper is required (a connect string, host:port[,...])")
        if not _ROOT_RE.match(self.root):
            raise ConfigError(
                f"--root must be an absolute ZooKeeper path like /storm, got {self.root!r}"
            )
        if not _ID_RE.match(self.supervisor_id) or self.supervisor_id in (".", ".."):
            raise ConfigError(
                f"--id must be letters, digits and . _ : - only, got {self.supervisor_id!r}"
            )
        if not 0 <= self.slots <= 1024:
            raise ConfigError(f"--slots must be between 0 and 1024, got {self.slots}")
        if not 1.0 <= self.session_timeout <= 120.0:
            raise ConfigError(
                f"--session-timeout must be between 1 and 120 seconds, got {self.session_timeout}"
            )
        if not 0 < self.heartbeat_interval < self.session_timeout:
            raise ConfigError(
                f"--heartbeat-interval must be > 0 and below the session timeout "
                f"({self.session_timeout}s), got {self.heartbeat_interval}"
            )
        if not self.host:
            object.__setattr__(self, "host", socket.getfqdn())
        if self.connect_timeout < self.session_timeout:
            raise ConfigError(
                f"connect timeout ({self.connect_timeout}s) must be at least the session "
                f"timeout ({self.session_timeout}s)"
            )


class Supervisor:
    """Fail-fast and stateless beyond ZooKeeper: kill -9 and a restart are harmless.

    A restarted supervisor finds its own leftover heartbeats by name and removes those
    of slots it no longer holds.
    """

    def __init__(self, config: SupervisorConfig, *, clock: Callable[[], float] = time.time):
        self.config = config
        self.id = config.supervisor_id
        self.client: KazooClient = make_kazoo_client(
            config.zookeeper, session_timeout=config.session_timeout
        )
        self._paths = Paths(config.root)
        self._membership = Membership(self.client, self.id, timeout=config.session_timeout)
        self._clock = clock
        self._start_ms = self._now_ms()
        self._guard = threading.Lock()
        self._assignments: dict[str, records.Assignment] = {}
        self._watched: set[str] = set()
        self._beats: set[str] = set()  # heartbeat paths this supervisor may have written
        self._held: list[tuple[str, int]] = []
        self._rescan = True
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        try:
            self.client.start(timeout=self.config.connect_timeout)
        except KazooTimeoutError as e:
            self.client.stop()
            self.client.close()
            raise ZooKeeperUnavailableError(
                f"could not reach ZooKeeper at {self.config.zookeeper} within "
                f"{self.config.connect_timeout:.0f}s"
            ) from e
        self.client.add_listener(self._on_state)
        ensure_folders(
            self.client,
            [self._paths.supervisors, self._paths.assignments, self._paths.workerbeats],
        )
        ChildrenWatch(self.client, self._paths.assignments, self._on_children)
        self.beat_once()
        self._thread.start()
        log.info("supervisor %s up with %d slots", self.id, self.config.slots)

    def stop(self) -> None:
        """Graceful: remove own heartbeats and registration, then close the session."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.config.session_timeout)
        try:
            for path in sorted(self._beats):
                self._membership.remove(path)
            self._membership.unregister(self._paths.supervisor(self.id))
        except (FencingError, KazooException) as e:
            log.info("could not clean up on stop (the leader will): %s", e)
        self.client.stop()
        self.client.close()

    @property
    def held(self) -> list[tuple[str, int]]:
        """(topology id, slot) pairs heartbeated at the last beat."""
        return list(self._held)

    # -- one beat -------------------------------------------------------------------------

    def beat_once(self) -> list[tuple[str, int]]:
        """Report liveness and the slots held; returns them as (topology id, slot)."""
        now = self._now_ms()
        with self._guard:
            assignments = dict(self._assignments)
        held = sorted(
            (tid, s.slot)
            for tid, assignment in assignments.items()
            for s in assignment.slots
            if s.supervisor_id == self.id
        )
        over = [h for h in held if h[1] >= self.config.slots]
        if over:
            log.warning("assigned slots beyond --slots %d ignored: %s", self.config.slots, over)
            held = [h for h in held if h[1] < self.config.slots]
        info = records.SupervisorInfo(
            supervisor_id=self.id,
            host=self.config.host,
            slots_total=self.config.slots,
            slots_used=len(held),
            start_time_ms=self._start_ms,
            version=__version__,
            heartbeat_ms=now,
        )
        self._membership.update(
            self._paths.supervisor(self.id), info.SerializeToString(deterministic=True)
        )
        wanted: set[str] = set()
        for tid, slot in held:
            path = self._paths.workerbeat(tid, worker_name(self.id, slot))
            beat = records.WorkerHeartbeat(
                topology_id=tid, supervisor_id=self.id, slot=slot, time_ms=now, status=NO_RUNTIME
            )
            self._beats.add(path)
            self._membership.put(path, beat.SerializeToString(deterministic=True))
            wanted.add(path)
        if self._rescan:
            self._rescan = False  # before the scan: a session change during it asks again
            self._beats |= self._find_own_beats()
        for path in sorted(self._beats - wanted):
            self._membership.remove(path)
            self._beats.discard(path)
        if held != self._held:
            log.info("holding %s (%s)", held or "no slots", NO_RUNTIME)
        self._held = held
        return held

    def _find_own_beats(self) -> set[str]:
        """Heartbeats with this supervisor's name, e.g. left by a previous process."""
        found: set[str] = set()
        for tid in self._children(self._paths.workerbeats):
            for name in self._children(self._paths.workerbeats_of(tid)):
                parsed = parse_worker_name(name)
                if parsed is not None and parsed[0] == self.id:
                    found.add(self._paths.workerbeat(tid, name))
        return found

    def _children(self, path: str) -> list[str]:
        try:
            return list(self.client.get_children(path))
        except NoNodeError:
            return []

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- watches (kazoo's event thread: record and wake, never block) -------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._rescan = True  # maybe a new session: re-register and look around
            self._wake.set()

    def _on_children(self, children: list[str]) -> bool | None:
        if self._stop.is_set():
            return False
        with self._guard:
            gone = self._watched - set(children)
            for tid in gone:
                self._assignments.pop(tid, None)
            self._watched -= gone
            new = set(children) - self._watched
            self._watched |= new
        for tid in sorted(new):
            self._watch_assignment(tid)
        if gone:
            self._wake.set()
        return None

    def _watch_assignment(self, tid: str) -> None:
        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            with self._guard:
                if tid not in self._watched or self._stop.is_set():
                    self._assignments.pop(tid, None)
                    return False  # the assignment is gone: stop watching it
                if data is None:
                    self._assignments.pop(tid, None)
                else:
                    try:
                        self._assignments[tid] = records.Assignment.FromString(data)
                    except DecodeError:
                        log.warning("ignoring a damaged assignment of %s", tid)
            self._wake.set()
            return None

        try:
            DataWatch(self.client, self._paths.assignment(tid), on_data)
        except KazooException as e:
            log.warning("could not watch the assignment of %s: %s", tid, e)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.config.heartbeat_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.beat_once()
            except (FencingError, KazooException) as e:
                log.info("heartbeat failed, retrying: %s", e)


if __name__ == "__main__":
    import sys

    from nimbus.cmd_supervisor import main

    sys.exit(main())
