"""The supervisor: one per worker host, keeps the slots the leader assigned to it.

It registers its ephemeral ``/supervisors/<id>`` (again on every new session), follows
``/assignments`` by watches, and every heartbeat interval writes, with one wall-clock
time, its own ``SupervisorInfo`` (``heartbeat_ms``, ``slots_used``) and a
``WorkerHeartbeat`` at ``/workerbeats/<topology-id>/<id>-<slot>`` for each slot assigned
to it, removing those of slots it no longer holds. It needs no Nimbus: assignments stay
served while no leader is up, and replicas are asked only to download code.

Invariant: a slot's heartbeat has exactly one writer: the worker while its process lives,
the supervisor before it starts and after it exits (both decided under the worker table's
lock). All writes go through ``fencing.Membership``, which only touches this supervisor's
own nodes. Of a topology's assigned slots only the first runs a worker process
(``pipeline.worker_processes``); the worker claims its slot in ZooKeeper before its query
starts (``pipeline.claims``), so a worker of a moved slot and its successor never run at
once. The other slots are held and heartbeated as spares. With ``workers=False``
(``--no-workers``) no process runs and every heartbeat says ``NO_RUNTIME``.

Its parts: ``pipeline.supervisor_config`` (the validated config), ``pipeline.supervisor_flags``
(the worker flags of ``nimbus supervisor``), ``pipeline.worker_processes`` (starting,
restarting, adopting and stopping workers). Their public names are importable from here.

Run it with ``nimbus supervisor`` or ``python -m nimbus.cli.cmd_supervisor`` (same flags).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from cluster import __version__
from cluster.api import records
from cluster.factory import connect, make_kazoo_client
from cluster.paths import Paths, parse_worker_name, worker_name
from cluster.reads import children_of
from cluster.threads import guarded_thread
from fencing import FencingError, Membership, ensure_folders
from pipeline.supervisor_config import SupervisorConfig, resolved
from pipeline.supervisor_flags import WorkerOptions, add_worker_arguments, worker_options
from pipeline.worker_processes import (
    DOWNLOAD_TIMEOUT,
    HEALTHY_RUN,
    STARTING,
    CodeUnavailable,
    WorkerProcess,
    WorkerProcesses,
)

# The names other code imports from here: the supervisor's one public surface.
__all__ = [
    "DOWNLOAD_TIMEOUT",
    "HEALTHY_RUN",
    "NO_RUNTIME",
    "SPARE",
    "STARTING",
    "CodeUnavailable",
    "Supervisor",
    "SupervisorConfig",
    "WorkerOptions",
    "WorkerProcess",
    "add_worker_arguments",
    "resolved",
    "worker_options",
]

log = logging.getLogger(__name__)

#: Heartbeat status with ``--no-workers``: the slot is held, nothing runs in it.
NO_RUNTIME = "assigned: no pipeline runtime yet"
#: Heartbeat status of a held slot that is not its topology's first: no process runs in it.
SPARE = (
    "idle: the topology runs as one Spark query in its first slot's worker, its parallelism "
    "as that query's partitions; to spread it over machines, give the supervisors "
    "--spark-master (a Spark cluster)"
)


class Supervisor:
    """Fail-fast and stateless beyond ZooKeeper: kill -9 and a restart are harmless.

    A restarted supervisor finds its own leftover heartbeats by name and removes those
    of slots it no longer holds.
    """

    def __init__(self, config: SupervisorConfig, *, clock: Callable[[], float] = time.time):
        config = resolved(config)
        self.config = config
        self.id = config.supervisor_id
        self.client: KazooClient = make_kazoo_client(
            config.zookeeper, session_timeout=config.session_timeout, auth=config.zk_auth
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
        self._thread = guarded_thread("supervisor", self._run, self._stop)
        # Worker processes. Their ``lock`` makes heartbeat ownership exact: a slot's beat is
        # written by the supervisor only while no process of it lives, checked and written
        # under the lock that starting and reaping a worker also take.
        self._workers = WorkerProcesses(
            config, self.client, self._paths, stopping=self._stop.is_set
        )
        self._manage_wake = threading.Event()
        self._manager = guarded_thread("workers", self._manage, self._stop)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        connect(self.client, self.config.zookeeper, self.config.connect_timeout)
        self.client.add_listener(self._on_state)
        ensure_folders(
            self.client,
            [self._paths.supervisors, self._paths.assignments, self._paths.workerbeats],
        )
        if self.config.workers:
            self._workers.open_store()
        # Reads every assignment before it returns (the watches fire once at registration),
        # so adopted workers are judged against the real assignments, never an empty view.
        ChildrenWatch(self.client, self._paths.assignments, self._on_children)
        if self.config.workers:
            self._workers.adopt()
        self.beat_once()
        self._thread.start()
        if self.config.workers:
            self._manager.start()
        log.info("supervisor %s up with %d slots", self.id, self.config.slots)

    def stop(self) -> None:
        """Graceful: remove own heartbeats and registration, then close the session."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        self._manage_wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.config.session_timeout)
        if self._manager.is_alive():
            self._manager.join(timeout=DOWNLOAD_TIMEOUT + 5)
        self._workers.stop_all()
        if self.client.state != KazooState.CONNECTED:
            # kazoo's calls would block until it reconnects: the session's expiry and the
            # leader clean up instead.
            log.info("not connected to ZooKeeper: leaving the clean-up to the leader")
        else:
            try:
                for path in sorted(self._beats):
                    self._membership.remove(path)
                self._membership.unregister(self._paths.supervisor(self.id))
            except (FencingError, KazooException) as e:
                log.info("could not clean up on stop (the leader will): %s", e)
        self.client.stop()
        self.client.close()

    def worker_counts(self) -> tuple[int, int]:
        """(workers running now, restarts scheduled so far): what its metrics show."""
        return self._workers.counts()

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
        with self._workers.lock:
            owned = {
                self._paths.workerbeat(w.topology_id, worker_name(self.id, w.slot))
                for w in self._workers.live()
            }
            for tid, slot in held:
                path = self._paths.workerbeat(tid, worker_name(self.id, slot))
                self._beats.add(path)
                wanted.add(path)
                if path in owned:
                    continue  # its worker process writes it
                status = self._slot_status(tid, slot, assignments[tid])
                beat = records.WorkerHeartbeat(
                    topology_id=tid, supervisor_id=self.id, slot=slot, time_ms=now, status=status
                )
                worker = self._workers.get(tid)
                if worker is not None and worker.slot == slot:
                    beat.last_error, beat.restarts = worker.last_error, worker.restarts
                    beat.failures_in_a_row = worker.failures_in_a_row
                    beat.log_path = str(worker.log_path)
                self._membership.put(path, beat.SerializeToString(deterministic=True))
            if self._rescan:
                self._rescan = False  # before the scan: a session change during it asks again
                self._beats |= self._find_own_beats()
            for path in sorted(self._beats - wanted - owned):  # a stopping worker still beats
                self._membership.remove(path)
                self._beats.discard(path)
        if held != self._held:
            log.info("holding %s", held or "no slots")
        self._held = held
        return held

    def _slot_status(self, tid: str, slot: int, assignment: records.Assignment) -> str:
        """What the supervisor's own heartbeat of a held slot says (no worker lives in it)."""
        if not self.config.workers:
            return NO_RUNTIME
        first = assignment.slots[0]
        if (first.supervisor_id, first.slot) != (self.id, slot):
            return SPARE
        worker = self._workers.get(tid)
        return worker.status if worker is not None and worker.slot == slot else STARTING

    def _find_own_beats(self) -> set[str]:
        """Heartbeats with this supervisor's name, e.g. left by a previous process."""
        found: set[str] = set()
        for tid in children_of(self.client, self._paths.workerbeats):
            for name in children_of(self.client, self._paths.workerbeats_of(tid)):
                parsed = parse_worker_name(name)
                if parsed is not None and parsed[0] == self.id:
                    found.add(self._paths.workerbeat(tid, name))
        return found

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
            self._manage_wake.set()
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
            self._manage_wake.set()
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

    # -- worker processes (the "workers" thread; ``pipeline.worker_processes``) -----------

    def _manage(self) -> None:
        interval = min(self.config.heartbeat_interval, 0.25)
        while not self._stop.is_set():
            try:
                self.manage_once()
            except (FencingError, KazooException, OSError) as e:
                log.warning("managing workers failed, retrying: %s", e)
            self._manage_wake.wait(interval)
            self._manage_wake.clear()

    def manage_once(self) -> None:
        """Reap exited workers, stop unassigned ones, start (or restart when due) the rest."""
        with self._guard:
            assignments = dict(self._assignments)
        self._workers.manage_once(assignments)
