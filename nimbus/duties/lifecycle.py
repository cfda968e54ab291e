"""Leader-only topology changes: kill, activate, deactivate, rebalance.

Each change is one fenced multi-op: a compare-and-set of ``/storms/<id>`` at the version
read, plus the ``/requests/<id>`` record when the client sent a request id (see
``nimbus.duties.requests``). A lost race re-reads and tries again; a retried request returns
its first outcome. Removal after a kill, and the end of a rebalance, are due times
stored in the record, so a new leader finishes what the old one started
(``LifecycleDuty``).
"""

from __future__ import annotations

import difflib
import logging
import threading
import time
from collections.abc import Callable, Mapping

import grpc
from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import pb, records
from cluster.apierror import ApiError
from cluster.names import COMPONENT_RE, check_name, check_request_id
from cluster.paths import Paths
from cluster.reads import read_storms
from fencing import (
    Check,
    Delete,
    FencedWriter,
    NotLeaderError,
    Op,
    SetData,
    WriteConflictError,
    run_duty,
    stamp_epoch,
)
from nimbus.duties.confirm import UnconfirmedError, recall_committed
from nimbus.duties.planning import kill_due, proof_of_absence, rebalance_done
from nimbus.duties.requests import OnDivergentServer, remember
from nimbus.duties.sweeper import sweep

log = logging.getLogger(__name__)
#: Lifecycle passes between two sweeps for orphan per-topology trees (one on taking office).
SWEEP_EVERY = 60

CurrentWriter = Callable[[], FencedWriter | None]
Change = Callable[[records.StormBase], None]
REQUESTS_KEPT = 1000
ATTEMPTS = 16


class Lifecycle:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        *,
        current_writer: CurrentWriter,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        on_divergent_server: OnDivergentServer | None = None,
    ) -> None:
        self._client = client
        self._paths = paths
        self._current_writer = current_writer
        self._wall_ms = wall_ms
        self._on_divergent = on_divergent_server

    # -- the calls ------------------------------------------------------------------------

    def kill(self, request: pb.KillTopologyRequest) -> pb.TopologyActionResponse:
        if request.wait_s < 0:
            raise _invalid(f"--wait must be >= 0 seconds, got {request.wait_s}")

        def change(base: records.StormBase) -> None:
            if base.status == records.KILLED:
                return  # killing twice is not an error; the first due time stands
            base.status = records.KILLED
            base.kill_wait_s = request.wait_s
            base.kill_time_ms = self._wall_ms()

        return self._mutate("KillTopology", request.name, request.client_request_id, change)

    def activate(self, request: pb.TopologyNameRequest) -> pb.TopologyActionResponse:
        return self._set_active(request, active=True)

    def deactivate(self, request: pb.TopologyNameRequest) -> pb.TopologyActionResponse:
        return self._set_active(request, active=False)

    def rebalance(self, request: pb.RebalanceTopologyRequest) -> pb.TopologyActionResponse:
        if request.num_workers < 0 or request.wait_s < 0:
            raise _invalid("--workers and --wait must not be negative")
        for component, parallelism in request.component_parallelism.items():
            if not COMPONENT_RE.fullmatch(component) or parallelism < 1:
                raise _invalid(f"bad parallelism {component!r}={parallelism}: name it, and >= 1")
        if not request.num_workers and not request.component_parallelism:
            raise _invalid("rebalance needs a new worker count or component parallelism")

        def change(base: records.StormBase) -> None:
            _require_running(base, "rebalance")
            _require_known_components(base, request.component_parallelism)
            if base.status != records.REBALANCING:
                base.status_before_rebalance = base.status
            base.status = records.REBALANCING
            if request.num_workers:
                base.num_workers = request.num_workers
            base.component_parallelism.update(request.component_parallelism)
            base.rebalance_until_ms = self._wall_ms() + request.wait_s * 1000

        return self._mutate("RebalanceTopology", request.name, request.client_request_id, change)

    # -- the one mutation path -----------------------------------------------------------

    def _set_active(
        self, request: pb.TopologyNameRequest, *, active: bool
    ) -> pb.TopologyActionResponse:
        def change(base: records.StormBase) -> None:
            _require_running(base, "activate" if active else "deactivate")
            if base.status == records.REBALANCING:
                base.status_before_rebalance = records.ACTIVE if active else records.INACTIVE
            else:
                base.status = records.ACTIVE if active else records.INACTIVE

        method = "ActivateTopology" if active else "DeactivateTopology"
        return self._mutate(method, request.name, request.client_request_id, change)

    def _mutate(
        self, method: str, name: str, request_id: str, change: Change
    ) -> pb.TopologyActionResponse:
        writer = self._current_writer()
        if writer is None or writer.token.cancelled:
            raise NotLeaderError("this replica is not the leader")
        check_name(name)
        check_request_id(request_id)
        for _ in range(ATTEMPTS):
            first = self._recall(writer, request_id)
            if first is not None:
                return self._answer(first.topology_id, first.epoch)
            topology_id, base, version = self._read(name)
            change(base)
            stamp_epoch(base, writer.token.epoch)
            ops: list[Op] = [
                SetData(
                    self._paths.storm(topology_id),
                    base.SerializeToString(deterministic=True),
                    version,
                ),
                *remember(
                    self._paths,
                    request_id,
                    method=method,
                    topology_id=topology_id,
                    epoch=writer.token.epoch,
                ),
            ]
            try:
                writer.batch(ops)
            except WriteConflictError as e:
                # Nothing written. Changed under us, the same request id landed at once,
                # or our server is behind the quorum (it showed an old version, or no
                # record): catch our server up on that path, then read or recall again.
                self._client.sync(e.path)
                continue
            return pb.TopologyActionResponse(
                topology_id=topology_id, name=name, status=base.status, epoch=writer.token.epoch
            )
        # Every attempt was nothing written: a retry with this request id is safe.
        raise ApiError(
            grpc.StatusCode.UNAVAILABLE,
            f"{name} kept changing under this leader's reads ({ATTEMPTS} attempts, nothing "
            "written); retry with the same request id",
        )

    def _recall(self, writer: FencedWriter, request_id: str) -> records.RequestOutcome | None:
        """The first outcome of this request id, committed again by us (``confirm``)."""
        try:
            return recall_committed(
                self._client, self._paths, writer, request_id,
                effects=lambda first: [self._paths.storm(first.topology_id)],
                on_divergent=self._on_divergent,
            )  # fmt: skip
        except UnconfirmedError as e:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, str(e)) from e

    def _read(self, name: str) -> tuple[str, records.StormBase, int]:
        try:
            topology_id = self._client.get(self._paths.name(name))[0].decode()
            data, stat = self._client.get(self._paths.storm(topology_id))
            return topology_id, records.StormBase.FromString(data), int(stat.version)
        except NoNodeError as e:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"no live topology named {name!r}") from e
        except (DecodeError, UnicodeDecodeError) as e:
            raise ApiError(grpc.StatusCode.DATA_LOSS, f"the record of {name!r} is damaged") from e

    def _answer(self, topology_id: str, epoch: int) -> pb.TopologyActionResponse:
        reply = pb.TopologyActionResponse(topology_id=topology_id, epoch=epoch)
        try:
            base = records.StormBase.FromString(self._client.get(self._paths.storm(topology_id))[0])
        except (NoNodeError, DecodeError):
            reply.status = records.KILLED  # already removed
            return reply
        reply.name, reply.status = base.name, base.status
        return reply


def _invalid(message: str) -> ApiError:
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _require_running(base: records.StormBase, action: str) -> None:
    if base.status == records.KILLED:
        raise ApiError(
            grpc.StatusCode.FAILED_PRECONDITION, f"cannot {action} {base.name}: it is being killed"
        )
    if base.status == records.CODE_MISSING:
        raise ApiError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"cannot {action} {base.name}: no replica holds its code (CODE_MISSING)",
        )


class LifecycleDuty:
    """Leader-only: remove killed topologies when due, end rebalances, prune old requests."""

    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        writer: FencedWriter,
        *,
        interval: float,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        storms: Callable[[], dict[str, records.StormBase]] | None = None,
    ) -> None:
        self._client = client
        self._paths = paths
        self._storms = storms or (lambda: read_storms(self._client, self._paths))
        self._writer = writer
        self._interval = interval
        self._wall_ms = wall_ms
        self._passes = 0
        self._thread = threading.Thread(target=self._run, name="lifecycle", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def run_once(self) -> list[str]:
        changes: list[str] = []
        now = self._wall_ms()
        storms = self._storms()
        for topology_id, base in sorted(storms.items()):
            try:
                change = self._step(topology_id, base, now)
            except NotLeaderError:
                raise
            except Exception:  # one damaged topology must not hold up every later one
                log.exception("lifecycle step of %s failed; the others go on", topology_id)
                continue
            if change:
                changes.append(change)
        self._prune_requests()
        if self._passes % SWEEP_EVERY == 0:
            changes += sweep(self._client, self._paths, self._writer, now_ms=now, storms=storms)
        self._passes += 1
        return changes

    def _step(self, topology_id: str, base: records.StormBase, now: int) -> str | None:
        if kill_due(base, now):
            self._remove(topology_id, base)
            return f"{topology_id}: removed"
        if (
            base.status == records.REBALANCING
            and now >= base.rebalance_until_ms
            and rebalance_done(base, self._assignment(topology_id))
        ):
            self._finish_rebalance(topology_id, now)
            return f"{topology_id}: rebalanced"
        return None

    def _remove(self, topology_id: str, base: records.StormBase) -> None:
        """Storm, name, assignment, errors and holder registrations, in one step each."""
        name_path = self._paths.name(base.name)
        ops: list[Op] = [Delete(self._paths.storm(topology_id))]
        try:
            data, stat = self._client.get(name_path)
            holder, version = data.decode(), int(stat.version)
        except NoNodeError:
            holder, version = "", -1
            ops += proof_of_absence(name_path)  # or the quorum's name would name nothing
        except UnicodeDecodeError:
            holder, version = topology_id, -1  # damaged: it names no live topology: it goes
            log.warning("name node %s of %s is damaged; removing it", name_path, topology_id)
        if holder == topology_id:
            ops.append(Delete(name_path, version))
        elif holder:
            ops.append(Check(name_path, version))  # another's, as read: left alone
        self._writer.batch(ops)
        for tree in (
            self._paths.assignment(topology_id),
            self._paths.workerbeats_of(topology_id),
            self._paths.errors_of(topology_id),
            self._paths.code_holders(topology_id),
            self._paths.claims_of(topology_id),
            self._paths.commits_of(topology_id),
        ):
            try:
                self._writer.delete_recursive(tree)
            except WriteConflictError as e:
                log.info("could not remove %s yet: %s", tree, e)

    def _assignment(self, topology_id: str) -> records.Assignment | None:
        try:
            data, _ = self._client.get(self._paths.assignment(topology_id))
            return records.Assignment.FromString(data)
        except (NoNodeError, DecodeError):
            return None

    def _finish_rebalance(self, topology_id: str, now: int) -> None:
        def change(base: records.StormBase) -> None:
            # Judged again on the record as read now: the view may hold an earlier
            # rebalance, and a newer one must run its full wait.
            if base.status == records.REBALANCING and now >= base.rebalance_until_ms:
                base.status = base.status_before_rebalance or records.ACTIVE
                base.rebalance_until_ms = 0

        self._writer.update_record(
            self._paths.storm(topology_id), records.StormBase.FromString, change
        )

    def _prune_requests(self) -> None:
        """The oldest request records and confirmations, beyond the newest kept."""
        for folder in (self._paths.requests, self._paths.confirmations):
            try:
                names = self._client.get_children(folder)
            except NoNodeError:
                continue
            if len(names) <= 2 * REQUESTS_KEPT:
                continue
            aged: list[tuple[int, str, int]] = []
            for name in names:
                try:
                    data, stat = self._client.get(f"{folder}/{name}")
                except NoNodeError:
                    continue
                try:
                    aged.append(
                        (records.RequestOutcome.FromString(data).time_ms, name, stat.version)
                    )
                except DecodeError:
                    aged.append((0, name, int(stat.version)))
            aged.sort()
            # At the version read: the age judged is the content deleted.
            stale = [Delete(f"{folder}/{n}", v) for _, n, v in aged[:-REQUESTS_KEPT]]
            for i in range(0, len(stale), 200):
                self._writer.batch(stale[i : i + 200])

    def _run(self) -> None:
        run_duty(
            "lifecycle",
            self._writer.token,
            self.run_once,
            interval=self._interval,
            log=log,
            first_pass_at_once=False,
        )


def _require_known_components(base: records.StormBase, asked: Mapping[str, int]) -> None:
    """A rebalance may only name components of the topology's graph (recorded at submit)."""
    known = set(base.component_parallelism)
    if not known:
        return  # recorded without a graph (validation off): nothing to judge against
    for component in sorted(set(asked) - known):
        close = difflib.get_close_matches(component, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise _invalid(
            f"topology {base.name!r} has no component {component!r}{hint} "
            f"(its components: {', '.join(sorted(known))})"
        )
