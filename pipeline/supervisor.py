"""The supervisor: one per worker host, keeps the slots the leader assigned to it.

It registers its ephemeral ``/supervisors/<id>`` (again on every new session), follows
``/assignments`` by watches, and every heartbeat interval writes, with one wall-clock
time, its own ``SupervisorInfo`` (``heartbeat_ms``, ``slots_used``) and a
``WorkerHeartbeat`` at ``/workerbeats/<topology-id>/<id>-<slot>`` for each slot assigned
to it, removing those of slots it no longer holds. It needs no Nimbus: assignments stay
served while no leader is up, and replicas are asked only to download code.

Workers: of a topology's assigned slots only the FIRST (``Assignment.slots[0]``) runs a
worker process, on the supervisor holding it: Spark runs the topology's parallelism as
partitions inside one query, so more processes would only share a checkpoint; the other
slots are held and heartbeated as spares. The supervisor fetches the package from any
replica holding it into its own ``CodeStore``, starts ``python -m pipeline.worker`` in a
session of its own (so the worker's JVM and Python helpers can be killed as a group),
restarts it after a crash with bounded exponential backoff and jitter, and stops it
(SIGTERM, then SIGKILL after ``worker_stop_timeout``) when its assignment goes away. The
worker itself claims its slot in ZooKeeper before its query starts (``pipeline.claims``),
so a worker of a moved slot and its successor never run at once. Workers outlive the
supervisor: each one's pid and start time are kept in ``worker.json`` beside it
(``pipeline.adopt``), and a restarted supervisor adopts the ones still alive instead of
starting a second worker, then stops those whose assignment moved. A slot's heartbeat
has exactly one writer: the worker while its process lives, the
supervisor before it starts and after it exits. With ``workers=False`` (``--no-workers``)
no process runs and every heartbeat says ``NO_RUNTIME``. All writes go through
``fencing.Membership``, which only touches this supervisor's own nodes.

Run it with ``nimbus supervisor`` or ``python -m nimbus.cmd_supervisor`` (same flags).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import grpc
from google.protobuf.message import DecodeError
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from cluster import __version__
from cluster.api import records
from cluster.errors import ConfigError
from cluster.factory import connect, make_kazoo_client
from cluster.paths import Paths, parse_worker_name, valid_root, worker_name
from cluster.reads import read_holders_of
from cluster.security.zkauth import ZkAuth
from cluster.threads import guarded
from code_sync.errors import PackageRejected, StoreError
from code_sync.package import MAX_ACCEPTED_PACKAGE_BYTES
from code_sync.peer import fetch_from_peer
from code_sync.store import CodeStore
from fencing import FencingError, Membership, ensure_folders
from pipeline import adopt
from pipeline.failures import take_failure

log = logging.getLogger(__name__)

#: Heartbeat status with ``--no-workers``: the slot is held, nothing runs in it.
NO_RUNTIME = "assigned: no pipeline runtime yet"
#: Heartbeat status of a held slot that is not its topology's first: no process runs in it.
SPARE = (
    "idle: the topology runs as one Spark query in its first slot's worker, its parallelism "
    "as that query's partitions; to spread it over machines, give the supervisors "
    "--spark-master (a Spark cluster)"
)
#: Heartbeat status of a first slot whose worker has not been started yet.
STARTING = "starting: worker not started yet"
#: Seconds a package download from one replica may take.
DOWNLOAD_TIMEOUT = 60.0
#: A worker that ran this long before exiting restarts after the shortest backoff again.
HEALTHY_RUN = 60.0

_ID_RE = re.compile(r"[A-Za-z0-9._:-]+")


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
    # Off unless asked: a config built without it keeps the heartbeat-only behaviour; the
    # command line turns it on unless --no-workers.
    workers: bool = False
    state_dir: str = ""  # code store and worker folders; "" -> <tmp>/nimbus-supervisor-<id>
    spark_master: str = "local[2]"
    worker_stop_timeout: float = 45.0  # SIGTERM, then SIGKILL after this many seconds
    restart_backoff: float = 1.0  # first restart delay; doubles per crash, with jitter
    restart_backoff_max: float = 60.0
    checkpoint_dir: str = ""  # workers' checkpoints: <dir>/<topology-id>; "" -> each worker's own
    suspended_fraction: float = 0.3  # a worker stops once SUSPENDED this part of the session
    zk_auth: ZkAuth | None = None  # digest identity and ACL of every node it creates

    def __post_init__(self) -> None:
        if not self.zookeeper.strip():
            raise ConfigError("--zookeeper is required (a connect string, host:port[,...])")
        if not valid_root(self.root):
            raise ConfigError(
                f"--root must be an absolute ZooKeeper path like /storm, got {self.root!r}"
            )
        if not _ID_RE.fullmatch(self.supervisor_id) or self.supervisor_id in (".", ".."):
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
        if not self.state_dir:
            default = Path(tempfile.gettempdir()) / f"nimbus-supervisor-{self.supervisor_id}"
            object.__setattr__(self, "state_dir", str(default))
        if not self.spark_master.strip():
            raise ConfigError("--spark-master must be a Spark master URL like local[2]")
        if self.worker_stop_timeout <= 0:
            raise ConfigError(
                f"--worker-stop-timeout must be positive, got {self.worker_stop_timeout}"
            )
        if not 0 < self.suspended_fraction <= 1:
            raise ConfigError(
                f"--suspended-fraction must be in (0, 1], got {self.suspended_fraction}"
            )
        if not 0 < self.restart_backoff <= self.restart_backoff_max:
            raise ConfigError(
                f"restart backoff must be > 0 and at most its maximum "
                f"({self.restart_backoff_max}s), got {self.restart_backoff}"
            )


class CodeUnavailable(Exception):
    """No replica could give us the package (yet): try again later."""


@dataclass
class _Worker:
    """One topology's worker process on this supervisor, and its restart bookkeeping."""

    topology_id: str
    slot: int
    digest: str
    folder: Path
    proc: subprocess.Popen[bytes] | None = None
    adopted: adopt.WorkerRecord | None = None  # a live worker started by an earlier process
    started_at: float = 0.0
    stop_sent_at: float | None = None
    killed: bool = False
    failures: int = 0  # in a row: a run longer than HEALTHY_RUN resets it
    restarts: int = 0
    last_error: str = ""
    next_start: float = 0.0
    status: str = STARTING

    @property
    def log_path(self) -> Path:
        return self.folder / "worker.log"

    @property
    def failures_in_a_row(self) -> int:
        """Failures since the last healthy run (waits for code are not failures)."""
        return self.failures if self.last_error else 0

    @property
    def pid(self) -> int | None:
        """The live (or not yet reaped) worker process, started here or adopted."""
        if self.proc is not None:
            return self.proc.pid
        return self.adopted.pid if self.adopted is not None else None


class Supervisor:
    """Fail-fast and stateless beyond ZooKeeper: kill -9 and a restart are harmless.

    A restarted supervisor finds its own leftover heartbeats by name and removes those
    of slots it no longer holds.
    """

    def __init__(self, config: SupervisorConfig, *, clock: Callable[[], float] = time.time):
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
        self._thread = threading.Thread(
            target=guarded("supervisor", self._run, stopping=self._stop.is_set),
            name="supervisor",
            daemon=True,
        )
        # Worker processes. ``_workers_lock`` makes heartbeat ownership exact: a slot's beat
        # is written by the supervisor only while no process of it lives, checked and
        # written under the lock that starting and reaping a worker also take.
        self._workers: dict[str, _Worker] = {}
        self._restarts = 0  # workers that exited unasked and were scheduled again (metrics)
        self._workers_lock = threading.Lock()
        self._manage_wake = threading.Event()
        self._manager = threading.Thread(
            target=guarded("workers", self._manage, stopping=self._stop.is_set),
            name="workers",
            daemon=True,
        )
        self._state = Path(config.state_dir)
        self._store: CodeStore | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        connect(self.client, self.config.zookeeper, self.config.connect_timeout)
        self.client.add_listener(self._on_state)
        ensure_folders(
            self.client,
            [self._paths.supervisors, self._paths.assignments, self._paths.workerbeats],
        )
        if self.config.workers:
            self._store = CodeStore(
                self._state / "code", max_package_bytes=MAX_ACCEPTED_PACKAGE_BYTES
            )
        # Reads every assignment before it returns (the watches fire once at registration),
        # so adopted workers are judged against the real assignments, never an empty view.
        ChildrenWatch(self.client, self._paths.assignments, self._on_children)
        if self.config.workers:
            self._adopt()
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
        self._stop_all_workers()
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
        with self._workers_lock:
            running = sum(1 for w in self._workers.values() if w.status == "running")
            return running, self._restarts

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
        with self._workers_lock:
            owned = {
                self._paths.workerbeat(w.topology_id, worker_name(self.id, w.slot))
                for w in self._workers.values()
                if w.pid is not None
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

    # -- worker processes (the "workers" thread) -------------------------------------------

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
        now = time.monotonic()
        with self._guard:
            assignments = dict(self._assignments)
        want: dict[str, tuple[int, str]] = {}
        for tid, assignment in assignments.items():
            first = assignment.slots[0] if assignment.slots else None
            if (
                first is not None
                and first.supervisor_id == self.id
                and first.slot < self.config.slots
                and assignment.digest
            ):
                want[tid] = (first.slot, assignment.digest)
        for tid, worker in list(self._workers.items()):
            self._reap(worker, now)
            if want.get(tid) != (worker.slot, worker.digest):
                if worker.pid is None:
                    with self._workers_lock:
                        del self._workers[tid]
                else:
                    self._stop_worker(worker, now)
        for tid, (slot, digest) in sorted(want.items()):
            if self._stop.is_set():
                return
            found = self._workers.get(tid)
            if found is None:
                worker = _Worker(tid, slot, digest, self._state / "workers" / tid)
                with self._workers_lock:
                    self._workers[tid] = worker
            else:
                worker = found
            if worker.pid is None and now >= worker.next_start and self._connected():
                self._start_worker(worker)

    def _adopt(self) -> None:
        """Take over the still-running workers an earlier process of this supervisor started."""
        for record in adopt.running_workers(self._state / "workers"):
            folder = self._state / "workers" / record.topology_id
            worker = _Worker(record.topology_id, record.slot, record.digest, folder)
            worker.adopted = record
            worker.started_at = time.monotonic()
            worker.status = "running"
            with self._workers_lock:
                self._workers[record.topology_id] = worker
            log.info(
                "adopted the running worker of %s in slot %d (pid %d)",
                record.topology_id,
                record.slot,
                record.pid,
            )

    def _connected(self) -> bool:
        """Start workers only while connected: a cut-off supervisor's view may be stale."""
        return bool(self.client.state == KazooState.CONNECTED)

    def _backoff(self, failures: int) -> float:
        """Exponential in the failures so far, bounded, with jitter (no restart stampede)."""
        doubled = self.config.restart_backoff * 2.0 ** max(0, min(failures - 1, 30))
        return min(self.config.restart_backoff_max, doubled) * random.uniform(0.5, 1.0)

    def _start_worker(self, worker: _Worker) -> None:
        try:
            package = self._ensure_code(worker.topology_id, worker.digest)
        except CodeUnavailable as e:
            worker.failures += 1
            worker.next_start = time.monotonic() + self._backoff(worker.failures)
            with self._workers_lock:
                worker.status = f"waiting for code: {e}"
            log.warning("no code yet for %s: %s", worker.topology_id, e)
            return
        worker.folder.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "pipeline.worker",
            "--zookeeper", self.config.zookeeper, "--root", self.config.root,
            "--topology-id", worker.topology_id, "--supervisor-id", self.id,
            "--slot", str(worker.slot), "--package", str(package),
            "--state-dir", str(worker.folder),
            "--heartbeat-interval", str(self.config.heartbeat_interval),
            "--session-timeout", str(self.config.session_timeout),
            "--spark-master", self.config.spark_master,
            "--host", self.config.host,
            "--suspended-fraction", str(self.config.suspended_fraction),
            "--last-error", worker.last_error, "--restarts", str(worker.restarts),
            "--failures-in-a-row", str(worker.failures_in_a_row),
            "--log-path", str(worker.log_path),
        ]  # fmt: skip
        if self.config.checkpoint_dir:
            checkpoint = Path(self.config.checkpoint_dir) / worker.topology_id
            cmd += ["--checkpoint-dir", str(checkpoint)]
        with worker.log_path.open("ab") as out, self._workers_lock:
            if self._stop.is_set():
                return
            # A session of its own: the worker's JVM and Python helpers share its group id.
            worker.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=worker.folder,
                start_new_session=True,
            )  # fmt: skip
            worker.started_at = time.monotonic()
            worker.stop_sent_at, worker.killed = None, False
            worker.status = "running"
        pid = worker.proc.pid
        ticks = adopt.start_ticks(pid)
        if ticks is not None:  # None: it died at once; the reaper sees to it
            adopt.save(
                worker.folder,
                adopt.WorkerRecord(pid, ticks, worker.topology_id, worker.slot, worker.digest),
            )
        pid_file = worker.folder / "worker.pid"
        tmp = pid_file.with_suffix(".tmp")
        tmp.write_text(f"{pid}\n")
        os.replace(tmp, pid_file)
        log.info(
            "started worker of %s in slot %d (pid %d)",
            worker.topology_id,
            worker.slot,
            worker.proc.pid,
        )

    def _ensure_code(self, tid: str, digest: str) -> Path:
        """The package in the local store, downloaded from any replica holding it if missing."""
        store = self._store
        assert store is not None
        if store.has(digest):
            return store.path(digest)
        holders = read_holders_of(self.client, self._paths, tid)
        peers = list(holders.replicas)
        if not peers:
            raise CodeUnavailable("no Nimbus replica holds the package")
        random.shuffle(peers)
        problems: list[str] = []
        for peer in peers:
            try:
                stored = store.write(
                    fetch_from_peer(peer, digest, timeout=DOWNLOAD_TIMEOUT),
                    expected_digest=digest,
                )
                log.info("downloaded the code of %s from %s", tid, peer)
                return stored.path
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                problems.append(f"{peer}: {code.name if code else e}")
            except (PackageRejected, StoreError) as e:
                problems.append(f"{peer}: {e}")
        raise CodeUnavailable("; ".join(problems))

    def _reap(self, worker: _Worker, now: float) -> None:
        """Notice an exited worker; schedule its restart unless it was asked to stop."""
        proc, adopted = worker.proc, worker.adopted
        if proc is not None:
            # WNOWAIT: the exited worker stays a zombie, so its pid (and group id) cannot be
            # reused while we kill what is left of its group (its JVM, Python helpers).
            running = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            pid = proc.pid
        elif adopted is not None:
            running = adopt.is_alive(adopted)  # not our child: no exit code to wait for
            pid = adopted.pid
        else:
            return
        if running:
            sent = worker.stop_sent_at
            if (
                sent is not None
                and not worker.killed
                and now - sent >= self.config.worker_stop_timeout
            ):
                log.warning("worker of %s ignored SIGTERM; killing it", worker.topology_id)
                _kill_group(pid)
                worker.killed = True
            return
        _kill_group(pid)
        code = proc.wait() if proc is not None else -1  # -1: an adopted worker's is unknown
        with self._workers_lock:
            worker.proc = None
            worker.adopted = None
            if worker.stop_sent_at is not None:
                worker.status = "stopped"
                log.info("worker of %s stopped (exit code %d)", worker.topology_id, code)
                adopt.forget(worker.folder)
                return
        adopt.forget(worker.folder)
        why = take_failure(worker.folder) or f"the worker exited with code {code}"
        with self._workers_lock:
            ran = now - worker.started_at
            worker.failures = 1 if ran >= HEALTHY_RUN else worker.failures + 1
            worker.restarts += 1
            worker.last_error = why
            self._restarts += 1
            delay = self._backoff(worker.failures)
            worker.next_start = now + delay
            worker.status = (
                f"restarting in {delay:.1f}s after {worker.failures} failure(s) in a row: {why}"
            )
        log.warning(
            "worker of %s exited with code %d after %.1fs (%s); restarting in %.1fs",
            worker.topology_id,
            code,
            ran,
            why,
            delay,
        )

    def _stop_worker(self, worker: _Worker, now: float) -> None:
        pid = worker.pid
        if pid is None or worker.stop_sent_at is not None:
            return
        log.info("stopping the worker of %s (no longer assigned here)", worker.topology_id)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        worker.stop_sent_at = now
        with self._workers_lock:
            worker.status = "stopping"

    def _stop_all_workers(self) -> None:
        """On a graceful stop: SIGTERM every worker, SIGKILL what outlives the timeout."""
        for worker in self._workers.values():
            self._stop_worker(worker, time.monotonic())
        deadline = time.monotonic() + self.config.worker_stop_timeout + 1
        while any(w.pid is not None for w in self._workers.values()):
            now = time.monotonic()
            for worker in self._workers.values():
                self._reap(worker, now)
                pid = worker.pid
                if now >= deadline and pid is not None and not worker.killed:
                    _kill_group(pid)
                    worker.killed = True
            time.sleep(0.05)


def _kill_group(pgid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# -- command line (``nimbus supervisor``) --------------------------------------------------


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    """Worker flags; ``nimbus.cmd_supervisor.add_arguments`` should call this too."""
    p.add_argument(
        "--no-workers",
        action="store_true",
        default=os.environ.get("NIMBUS_NO_WORKERS", "") not in ("", "0", "false"),
        help="heartbeat assigned slots only, start no worker processes (tests without Spark)",
    )
    p.add_argument(
        "--state-dir",
        default=os.environ.get("NIMBUS_STATE_DIR", ""),
        help="code store and worker folders (checkpoints); default <tmp>/nimbus-supervisor-<id>",
    )
    p.add_argument(
        "--spark-master",
        default=os.environ.get("NIMBUS_SPARK_MASTER", "local[2]"),
        help="Spark master URL for workers",
    )
    p.add_argument(
        "--worker-stop-timeout",
        type=float,
        default=float(os.environ.get("NIMBUS_WORKER_STOP_TIMEOUT", "45")),
        help="seconds between SIGTERM and SIGKILL when stopping a worker",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("NIMBUS_CHECKPOINT_DIR", ""),
        help="workers' checkpoints as <dir>/<topology-id>; a folder every supervisor shares "
        "lets a moved slot resume where it stopped (default: under each worker's folder)",
    )
    p.add_argument(
        "--suspended-fraction",
        type=float,
        default=float(os.environ.get("NIMBUS_SUSPENDED_FRACTION", "0.3")),
        help="a worker stops its query once its ZooKeeper connection was SUSPENDED for "
        "this fraction of the session timeout",
    )


class WorkerOptions(TypedDict):
    workers: bool
    state_dir: str
    spark_master: str
    worker_stop_timeout: float
    checkpoint_dir: str
    suspended_fraction: float


def worker_options(args: argparse.Namespace) -> WorkerOptions:
    """``SupervisorConfig`` keyword arguments from ``add_worker_arguments``' flags."""
    return {
        "workers": not bool(args.no_workers),
        "state_dir": str(args.state_dir),
        "spark_master": str(args.spark_master),
        "worker_stop_timeout": float(args.worker_stop_timeout),
        "checkpoint_dir": str(args.checkpoint_dir),
        "suspended_fraction": float(args.suspended_fraction),
    }
