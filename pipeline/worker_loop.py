"""The worker: one process running one topology's Spark query for the slot it was given.

The supervisor starts it (``python -m pipeline.worker``, whose flags are in that module)
and owns nothing of it but the
process: while the worker runs, the worker alone writes its ``WorkerHeartbeat`` at
``/workerbeats/<topology-id>/<supervisor-id>-<slot>`` (through ``fencing.Membership`` with
the supervisor's identity, the owner of ``<supervisor-id>-*`` nodes); the supervisor writes
it only before the worker starts and after it exits. The worker beats from its first
second with status ``starting`` because a SparkSession and the first micro-batch take
5-15 s here, longer than a heartbeat timeout.

A file sink's checkpoint lives beside its output (``pipeline.lineage``), so a slot that
moves to any supervisor resumes it; other sinks' under ``--checkpoint-dir`` (default
``<state-dir>/checkpoint``, this supervisor's own; give a folder every supervisor shares),
which, when given, holds file sinks' too. A worker restarted after a crash resumes with
nothing lost and nothing counted twice; one whose checkpoint cannot account for the
batches already committed or published refuses to publish and fails loudly.

Data-plane fencing (``pipeline.claims``, ``pipeline.commits``): the query starts only once
the worker holds the claim on its topology's slot, and every sink publishes only under
it. The query stops between micro-batches, and the worker exits, when the assignment
moves (exit 0), on SIGTERM (exit 0) or when the claim is lost or at risk (exit 4): session
LOST, claim node gone, SUSPENDED for longer than ``--suspended-fraction`` of the session
timeout, no word from ZooKeeper for a session timeout. A worker outlives its supervisor:
a restarted supervisor adopts it (``pipeline.adopt``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError

from cluster.api import records
from cluster.paths import Paths, worker_name
from fencing import FencingError, Membership
from pipeline.activity import Activity
from pipeline.claims import ClaimAbortedError, NotAssignedError, SlotClaim
from pipeline.commits import Committer
from pipeline.errors import PipelineRunError, TopologyError
from pipeline.failures import one_line
from pipeline.graph import Topology
from pipeline.lineage import checkpoint_lineage, last_planned_batch
from pipeline.package import load_topology, unpack_package
from pipeline.progress import Progress
from pipeline.runner import TopologyRun, run
from pipeline.session import make_spark
from pipeline.sink_setup import adopt_sink_folders, fence_sinks, sink_checkpoints

log = logging.getLogger(__name__)

#: Exit codes the supervisor reports; any nonzero one makes it restart the worker.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NO_ZOOKEEPER = 3
EXIT_FENCED = 4  # the claim was lost or at risk: the query stopped, nothing more published

#: How long a stop waits for the query to be between micro-batches before stopping anyway.
STOP_TIMEOUT = 30.0
#: The same once fenced off: the batch in flight cannot publish, so do not wait for it long.
FENCED_STOP_TIMEOUT = 3.0
#: ``_watch``'s answers when the topology was deactivated or rebalanced: not exit codes.
_PAUSE = -1
_REBALANCE = -2
#: Seconds past a kill's due time that its workers may take to go (a lifecycle pass).
KILL_GRACE = 10.0
#: Heartbeat status of a worker whose topology is deactivated.
PAUSED = "inactive: query stopped until the topology is activated"


@dataclass(frozen=True)
class FailureHistory:
    """The slot's earlier failures, as its supervisor counted them; in every heartbeat."""

    last_error: str = ""
    failures_in_a_row: int = 0
    restarts: int = 0
    log_path: str = ""


class Worker:
    """Runs the query and beats; ``main`` wires it to flags and signals."""

    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        *,
        claim: SlotClaim,
        heartbeat_interval: float,
        session_timeout: float,
        history: FailureHistory | None = None,
    ) -> None:
        """The worker of ``claim``'s slot (its topology, supervisor and slot)."""
        topology_id, supervisor_id, slot = claim.topology_id, claim.supervisor_id, claim.slot
        self.topology_id = topology_id
        self.history = history or FailureHistory()
        self.failure: str | None = None  # why the query failed, one line
        self._failed = False  # the failure is in the heartbeat already
        self.supervisor_id = supervisor_id
        self.slot = slot
        self.stop_requested = threading.Event()
        self._client = client
        self._paths = paths
        self._session_timeout = session_timeout
        self.claim = claim
        self._membership = Membership(client, supervisor_id, timeout=session_timeout)
        self._path = paths.workerbeat(topology_id, worker_name(supervisor_id, slot))
        self._interval = heartbeat_interval
        self._status = "starting"
        self._run: TopologyRun | None = None
        self._progress = Progress()
        self._parallelism: dict[str, int] = {}  # of the running query, per component
        self._note = ""  # why its partitioning differs from the one asked for
        self._lock = threading.Lock()
        self._beats_done = threading.Event()
        self._beater = threading.Thread(target=self._beat_loop, name="worker-beat", daemon=True)

    def set_status(self, status: str) -> None:
        with self._lock:
            self._status = status

    def start_beating(self) -> None:
        self.beat()
        self._beater.start()

    def finish_beating(self, status: str) -> None:
        """Stop the beat thread and leave a last heartbeat saying how the worker ended."""
        self._beats_done.set()
        if self._beater.is_alive():
            self._beater.join(timeout=self._interval * 4 + 5)
        self.set_status(status)
        self.beat()

    def update_progress(self) -> None:
        """Read Spark's progress reports; on the main thread, never the heartbeat's.

        A py4j call waits for a busy driver JVM: a heartbeat blocked behind one went
        stale and made the leader move a healthy worker's slot.
        """
        with self._lock:
            topology_run = self._run
        if topology_run is None:
            return
        try:
            progress = self._progress.copy()
            progress.update(topology_run, time.monotonic())
        except Exception as e:  # py4j or Spark trouble must not stop the worker
            log.debug("no progress report: %s", e)
            return
        with self._lock:
            self._progress = progress

    def beat(self) -> None:
        if self._client.state != KazooState.CONNECTED:
            return  # kazoo's calls would block until it reconnects; the next beat retries
        with self._lock:
            status, progress = self._status, self._progress
            parallelism, note = dict(self._parallelism), self._note
        beat = records.WorkerHeartbeat(
            topology_id=self.topology_id,
            supervisor_id=self.supervisor_id,
            slot=self.slot,
            time_ms=int(time.time() * 1000),
            batches_committed=progress.batches,
            rows_processed=progress.rows,
            last_batch_id=progress.last_batch_id,
            status=status,
            last_error=self.history.last_error,
            # A committed batch ends a run of failures: the pipeline works again.
            failures_in_a_row=(
                0 if progress.batches and not self._failed else self.history.failures_in_a_row
            ),
            restarts=self.history.restarts,
            log_path=self.history.log_path,
            components=progress.components(parallelism),
            rows_per_s=round(progress.rows_per_s(), 1),
            partitioning_note=note,
        )
        try:
            self._membership.put(self._path, beat.SerializeToString(deterministic=True))
        except (FencingError, KazooException) as e:
            log.info("heartbeat failed, retrying: %s", e)

    def _beat_loop(self) -> None:
        # The worker outlives its supervisor: a restarted one adopts it, and the claim
        # (not the parent process) decides whether it may keep running.
        disconnected: float | None = None
        while not self._beats_done.wait(self._interval):
            if self._client.state == KazooState.CONNECTED:
                disconnected = None
            elif disconnected is None:
                disconnected = time.monotonic()
            elif self.claim.token is None and time.monotonic() - disconnected > (
                self._session_timeout
            ):
                # Before the claim nothing is running or held, and kazoo's reads block
                # until it reconnects: an orphan cut off for good must not wait forever.
                log.error("no ZooKeeper for a session timeout before the claim; exiting")
                os._exit(EXIT_NO_ZOOKEEPER)
            self.beat()

    def topology_config(self) -> dict[str, Any]:
        """The config submitted with the topology (``--config-json``), for ``build(config)``."""
        try:
            data, _ = self._client.get(self._paths.storm(self.topology_id))
            text = records.StormBase.FromString(data).config_json
            config = json.loads(text) if text.strip() else {}
        except (KazooException, DecodeError, ValueError) as e:
            raise PipelineRunError(
                f"cannot read the config of topology {self.topology_id}: {e}"
            ) from e
        if not isinstance(config, dict):
            raise PipelineRunError(f"the config of topology {self.topology_id} is not an object")
        return config

    def run(
        self, package: Path, state_dir: Path, spark_master: str, checkpoint: Path | None = None
    ) -> int:
        """Start Spark, claim the slot, then run the query until told to stop; the exit code."""
        state_dir.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(package.read_bytes()).hexdigest() if package.is_file() else ""
        unpack_to = state_dir / f"package-{digest[:16]}" if digest else None
        root = unpack_package(package, unpack_to)
        self.set_status("starting: Spark session")
        # The session first, before user code: its JVM options only apply when it starts it.
        spark = make_spark(spark_master, f"nimbus-{self.topology_id}", python_path=[root])
        try:
            if self.stop_requested.is_set():
                return EXIT_OK
            topology = load_topology(root, config=self.topology_config())
            activity = Activity(self._client, self._paths.storm(self.topology_id))
            self.set_status("waiting for the claim")
            try:
                token = self.claim.acquire(self.stop_requested)
            except NotAssignedError as e:
                log.info("not starting: %s", e)
                return EXIT_OK
            except ClaimAbortedError:
                return EXIT_OK
            committer = Committer(self.claim, timeout=self._session_timeout)
            fence_sinks(topology, committer)
            self._adopt_sink_folders(topology)  # before any checkpoint beside the output
            root = checkpoint or state_dir / "checkpoint"
            checkpoints = {spec.name: root / spec.name for spec in topology.sinks}
            checkpoints.update(sink_checkpoints(topology, checkpoint))
            for sink, where in checkpoints.items():
                lineage = checkpoint_lineage(where)
                committer.resume_from(sink, lineage, last_planned_batch(where), str(where))
            while True:
                if not activity.active.is_set():
                    self.set_status(PAUSED)
                    log.info("%s: deactivated, query stopped until activated", self.topology_id)
                    if not self._wait_active(activity):
                        # As in _watch: an assignment that moved or went is a clean end.
                        ended = self.claim.stop_reason() is not None and not self.claim.moved
                        return EXIT_FENCED if ended else EXIT_OK
                self.set_status("starting: query")
                running = _rebalanced(topology, activity.parallelism())
                topology_run = run(
                    running,
                    spark,
                    root,
                    trigger="continuous",
                    name=self.topology_id,
                    checkpoints=checkpoints,
                )
                with self._lock:
                    self._run = topology_run
                    self._status = "running"
                    self._progress.state_partitions.update(topology_run.state_partitions)
                    self._parallelism = {spec.name: spec.parallelism for spec in running}
                    self._note = "; ".join(topology_run.notes.values())
                log.info(
                    "%s: query started in slot %s (claim epoch %d), parallelism %s",
                    self.topology_id,
                    self.slot,
                    token.epoch,
                    self._parallelism,
                )
                code = self._watch(topology_run, token.epoch, activity, running)
                if code not in (_PAUSE, _REBALANCE):
                    return code
        finally:
            self.claim.release()
            spark.stop()

    def _report_failure(self, failure: str) -> None:
        """Say so in the heartbeat at once: the user sees a failing topology now, not
        after Spark has stopped and the supervisor has reaped this process."""
        with self._lock:
            ran = self._progress.batches > 0  # a healthy run ended: a new run of failures
        self.history = FailureHistory(
            last_error=failure,
            failures_in_a_row=1 if ran else self.history.failures_in_a_row + 1,
            restarts=self.history.restarts,
            log_path=self.history.log_path,
        )
        self._failed = True
        self.set_status(f"failed: {failure}")
        self.beat()

    def _adopt_sink_folders(self, topology: Topology) -> None:
        adopt_sink_folders(topology, self.topology_id, self._gives_up)

    def _gives_up(self, owner: str) -> bool:
        """Whether topology ``owner`` lets go of a sink folder (``adopt_folder``).

        Removed: at once. Killed: once none of its workers holds a claim, waiting for them
        to drain until the kill's removal is due (plus a lifecycle pass). Still scheduled
        (active, inactive, rebalancing, code missing): never.
        """
        while True:
            try:
                data, _ = self._client.get(self._paths.storm(owner))
                base = records.StormBase.FromString(data)
            except NoNodeError:
                return True
            except (KazooException, DecodeError) as e:
                raise PipelineRunError(f"cannot read the record of topology {owner}: {e}") from e
            if base.status != records.KILLED:
                return False
            try:
                claimed = bool(self._client.get_children(self._paths.claims_of(owner)))
            except NoNodeError:
                claimed = False
            if not claimed:
                return True
            due_s = (base.kill_time_ms + base.kill_wait_s * 1000) / 1000 + KILL_GRACE
            left = due_s - time.time()
            if left <= 0:
                return False
            log.info("sink folder of killed topology %s: waiting for its workers", owner)
            if self.stop_requested.wait(min(0.5, left)):
                return False

    def _wait_active(self, activity: Activity) -> bool:
        """Hold the claim while deactivated; False when told to stop or the claim ends."""
        while not activity.active.wait(0.2):
            if self.stop_requested.is_set() or self.claim.stop_reason() is not None:
                return False
        return not self.stop_requested.is_set()

    def _watch(
        self, topology_run: TopologyRun, epoch: int, activity: Activity, running: Topology
    ) -> int:
        """Keep the query until a stop is asked for, the claim ends, or the query fails.

        Returns ``_PAUSE`` after stopping it because the topology was deactivated, and
        ``_REBALANCE`` when the record asks for other parallelism than ``running`` has.
        """
        code = EXIT_OK
        reason: str | None = None
        next_progress = 0.0
        while not self.stop_requested.wait(0.1):
            if time.monotonic() >= next_progress:
                self.update_progress()
                next_progress = time.monotonic() + self._interval
            reason = self.claim.stop_reason()
            if reason is not None:
                code = EXIT_OK if self.claim.moved else EXIT_FENCED
                break
            if not activity.active.is_set():
                reason, code = "topology deactivated", _PAUSE
                break
            asked = activity.parallelism()
            if any(asked.get(spec.name, spec.parallelism) != spec.parallelism for spec in running):
                reason, code = f"rebalanced to parallelism {asked}", _REBALANCE
                break
            failure = topology_run.exception()
            if failure is not None or not topology_run.is_active:
                refusal = self.claim.stop_reason() or self.claim.publish_refusal()
                if refusal is not None:  # the sink refused a batch: fenced, not broken
                    reason, code = refusal, EXIT_FENCED
                    break
                log.error("%s: the query ended: %s", self.topology_id, failure)
                self.failure = one_line(failure) if failure is not None else "the query ended"
                self._report_failure(self.failure)
                return EXIT_FAILED
        if reason is None:  # asked to stop: a claim already at risk still means fenced
            reason = self.claim.stop_reason() or self.claim.publish_refusal()
            if reason is not None and not self.claim.moved:
                code = EXIT_FENCED
        fenced = code == EXIT_FENCED
        log.info(
            "%s: stopping the query%s",
            self.topology_id,
            f" ({reason})" if reason else " between micro-batches",
        )
        self.set_status(f"stopping: {reason}" if reason else "stopping")
        try:
            topology_run.stop(timeout=FENCED_STOP_TIMEOUT if fenced else STOP_TIMEOUT)
        except PipelineRunError as e:
            if reason is None and self.claim.publish_refusal() is None:
                raise
            # The claim ended first: a batch refused by the sink's gate failed the query.
            log.info("%s: the query ended fenced off: %s", self.topology_id, e)
        self.update_progress()
        log.info("%s: query stopped (claim epoch %d)", self.topology_id, epoch)
        return code


def _rebalanced(topology: Topology, parallelism: dict[str, int]) -> Topology:
    """The package's topology with the parallelism the record asks for (a rebalance's)."""
    known = {name: n for name, n in parallelism.items() if name in topology.names}
    try:
        return topology.with_parallelism(known)
    except TopologyError as e:
        raise PipelineRunError(f"the recorded parallelism cannot be applied: {e}") from e
