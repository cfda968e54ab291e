"""A supervisor's worker processes: started, reaped, restarted with backoff, stopped.

Of a topology's assigned slots only the first runs a worker process, on the supervisor
holding it. Each worker runs ``python -m pipeline.worker`` in a session of its own (so its
JVM and Python helpers are killed as a group), is restarted after a crash with bounded
exponential backoff and jitter, and is stopped (SIGTERM, then SIGKILL after
``worker_stop_timeout``) when its assignment goes away. Workers outlive the supervisor:
``pipeline.adopt`` lets a restarted one take over those still alive.

Invariant: ``WorkerProcesses.lock`` is held whenever a worker is started, reaped or its
status changes, so the supervisor's heartbeat, taken under the same lock, writes a slot's
beat only while no process of it lives (the worker writes its own while it does).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import grpc
from kazoo.client import KazooClient, KazooState

from cluster.api import records
from cluster.paths import Paths
from cluster.reads import read_holders_of
from code_sync.errors import PackageRejected, StoreError
from code_sync.package import MAX_ACCEPTED_PACKAGE_BYTES
from code_sync.peer import fetch_from_peer
from code_sync.store import CodeStore
from pipeline import adopt
from pipeline.failures import take_failure
from pipeline.supervisor_config import SupervisorConfig

log = logging.getLogger(__name__)

#: Heartbeat status of a first slot whose worker has not been started yet.
STARTING = "starting: worker not started yet"
#: Seconds a package download from one replica may take.
DOWNLOAD_TIMEOUT = 60.0
#: A worker that ran this long before exiting restarts after the shortest backoff again.
HEALTHY_RUN = 60.0


class CodeUnavailable(Exception):
    """No replica could give us the package (yet): try again later."""


@dataclass
class WorkerProcess:
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
    def running(self) -> bool:
        """Its process lives and was not asked to stop (``status`` is the text for people)."""
        return self.pid is not None and self.stop_sent_at is None

    @property
    def pid(self) -> int | None:
        """The live (or not yet reaped) worker process, started here or adopted."""
        if self.proc is not None:
            return self.proc.pid
        return self.adopted.pid if self.adopted is not None else None


class WorkerProcesses:
    """The table of one supervisor's workers; driven by its "workers" thread."""

    def __init__(
        self,
        config: SupervisorConfig,
        client: KazooClient,
        paths: Paths,
        *,
        stopping: Callable[[], bool],
    ) -> None:
        self.config = config
        self.id = config.supervisor_id
        self.client = client
        self._paths = paths
        self._stopping = stopping
        self._state = Path(config.state_dir)
        self._store: CodeStore | None = None
        self.lock = threading.Lock()
        self._workers: dict[str, WorkerProcess] = {}
        self._restarts = 0  # workers that exited unasked and were scheduled again (metrics)

    def open_store(self) -> None:
        """The local code store; before ``adopt`` and the first ``manage_once``."""
        self._store = CodeStore(self._state / "code", max_package_bytes=MAX_ACCEPTED_PACKAGE_BYTES)

    def counts(self) -> tuple[int, int]:
        """(workers running now, restarts scheduled so far)."""
        with self.lock:
            running = sum(1 for w in self._workers.values() if w.running)
            return running, self._restarts

    def live(self) -> list[WorkerProcess]:
        """Workers whose process lives (or is not yet reaped); call under ``lock``."""
        return [w for w in self._workers.values() if w.pid is not None]

    def get(self, tid: str) -> WorkerProcess | None:
        """The worker of a topology, if this supervisor keeps one; call under ``lock``."""
        return self._workers.get(tid)

    def manage_once(self, assignments: dict[str, records.Assignment]) -> None:
        """Reap exited workers, stop unassigned ones, start (or restart when due) the rest."""
        now = time.monotonic()
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
                    with self.lock:
                        del self._workers[tid]
                else:
                    self._stop_worker(worker, now)
        for tid, (slot, digest) in sorted(want.items()):
            if self._stopping():
                return
            found = self._workers.get(tid)
            if found is None:
                worker = WorkerProcess(tid, slot, digest, self._state / "workers" / tid)
                with self.lock:
                    self._workers[tid] = worker
            else:
                worker = found
            if worker.pid is None and now >= worker.next_start and self._connected():
                self._start_worker(worker)

    def adopt(self) -> None:
        """Take over the still-running workers an earlier process of this supervisor started."""
        for record in adopt.running_workers(self._state / "workers"):
            folder = self._state / "workers" / record.topology_id
            worker = WorkerProcess(record.topology_id, record.slot, record.digest, folder)
            worker.adopted = record
            worker.started_at = time.monotonic()
            worker.status = "running"
            with self.lock:
                self._workers[record.topology_id] = worker
            log.info(
                "adopted the running worker of %s in slot %d (pid %d)",
                record.topology_id,
                record.slot,
                record.pid,
            )

    def stop_all(self) -> None:
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

    def _connected(self) -> bool:
        """Start workers only while connected: a cut-off supervisor's view may be stale."""
        return bool(self.client.state == KazooState.CONNECTED)

    def _backoff(self, failures: int) -> float:
        """Exponential in the failures so far, bounded, with jitter (no restart stampede)."""
        doubled = self.config.restart_backoff * 2.0 ** max(0, min(failures - 1, 30))
        return min(self.config.restart_backoff_max, doubled) * random.uniform(0.5, 1.0)

    def _start_worker(self, worker: WorkerProcess) -> None:
        try:
            package = self._ensure_code(worker.topology_id, worker.digest)
        except CodeUnavailable as e:
            worker.failures += 1
            worker.next_start = time.monotonic() + self._backoff(worker.failures)
            with self.lock:
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
        with worker.log_path.open("ab") as out, self.lock:
            if self._stopping():
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

    def _reap(self, worker: WorkerProcess, now: float) -> None:
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
        with self.lock:
            worker.proc = None
            worker.adopted = None
            if worker.stop_sent_at is not None:
                worker.status = "stopped"
                log.info("worker of %s stopped (exit code %d)", worker.topology_id, code)
                adopt.forget(worker.folder)
                return
        adopt.forget(worker.folder)
        why = take_failure(worker.folder) or f"the worker exited with code {code}"
        with self.lock:
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

    def _stop_worker(self, worker: WorkerProcess, now: float) -> None:
        pid = worker.pid
        if pid is None or worker.stop_sent_at is not None:
            return
        log.info("stopping the worker of %s (no longer assigned here)", worker.topology_id)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        worker.stop_sent_at = now
        with self.lock:
            worker.status = "stopping"


def _kill_group(pgid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
