"""Accepting a topology: store the package, gather replicas, then publish it, fenced.

The order is what makes an acknowledged topology impossible to lose: the leader stores
the package, runs its ``build()`` and the topology validation in a sandboxed child
process (a broken or hostile topology is refused here), registers itself as a holder,
waits until ``min_replicas`` replicas hold a verified copy (bounded, re-checking
leadership), and only then writes ``/storms/<id>`` and ``/names/<name>`` in one fenced
multi-op. The call is answered after that write.
If anything fails before it, the holder registrations are removed and nothing refers to
the package; the code itself is collected after the grace period.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.recipe.watchers import ChildrenWatch

from cluster.api import pb, records
from cluster.apierror import ApiError
from cluster.names import check_digest_arg, check_name, topology_id
from cluster.reads import live_replicas, read_holders_of
from code_sync.errors import PackageRejected, StoreError
from code_sync.pusher import PUSH_RETRY_S, PushRound, push_delay
from code_sync.store import CodeStore
from fencing import (
    Create,
    FencedWriter,
    Membership,
    NotLeaderError,
    WriteConflictError,
    WriteOutcomeUnknown,
    stamp_epoch,
)
from nimbus.config import NimbusConfig
from nimbus.duties.confirm import UnconfirmedError, recall_committed
from nimbus.duties.package_check import (
    CheckLimits,
    PackageCheckFailed,
    PackageInvalid,
    check_package,
)
from nimbus.duties.requests import OnDivergentServer, remember

log = logging.getLogger(__name__)

#: The replication wait in ZooKeeper write round trips (the beats' latency), at least.
WAIT_PER_LATENCY = 8.0

CurrentWriter = Callable[[], FencedWriter | None]
NewPushRound = Callable[[str, str], PushRound]  # (topology id, digest)
VERDICTS_KEPT = 256


class Submitter:
    def __init__(
        self,
        client: KazooClient,
        config: NimbusConfig,
        store: CodeStore,
        *,
        current_writer: CurrentWriter,
        wall_s: Callable[[], float] = time.time,
        on_divergent_server: OnDivergentServer | None = None,
        push_round: NewPushRound | None = None,
        zk_latency: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self._on_divergent = on_divergent_server
        self._zk_latency = zk_latency
        self._push_round = push_round or (lambda tid, digest: PushRound(store, tid, digest))
        self._client = client
        self._config = config
        self._paths = config.paths
        self._store = store
        self._current_writer = current_writer
        self._membership = Membership(client, config.replica_id, timeout=config.session_timeout)
        self._wall_s = wall_s
        self._counter = 0
        self._counter_lock = threading.Lock()
        # (digest, config) -> graph, for valid ones: build(config) may differ per config
        self._verdicts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._verdicts_guard = threading.Lock()
        self._checking: dict[tuple[str, str], threading.Lock] = {}  # the checks in progress

    def submit(self, requests: Iterator[pb.SubmitTopologyRequest]) -> pb.SubmitTopologyResponse:
        writer = self._writer()
        header = self._header(requests)
        name = check_name(header.name)
        first = self._replay(header.client_request_id, writer)
        if first is not None:
            return first  # a retry of a submit that already succeeded: no second topology
        check_digest_arg(header.expected_digest)
        if header.package_size > self._config.max_package_bytes:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"package is {header.package_size / 2**20:.1f} MiB, over the "
                f"{self._config.max_package_mib:.1f} MiB limit",
            )
        if self._client.exists(self._paths.name(name)):
            return self._replay_or_taken(header.client_request_id, name, writer)
        chunks = (r.chunk for r in requests if r.WhichOneof("item") == "chunk")
        try:
            stored = self._store.write(
                chunks,
                expected_digest=header.expected_digest,
                expected_size=header.package_size or None,
            )
        except PackageRejected as e:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"package rejected: {e}") from e
        except StoreError as e:
            raise ApiError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"cannot store: {e}") from e
        components = self._check(name, stored.digest, header.config_json)
        new_id = self._new_id(name)
        own_node = self._paths.code_holder(new_id, self._config.replica_id)
        self._membership.hold(own_node, stored.digest.encode())
        try:
            holders = self._await_replicas(new_id, stored.digest, writer)
            base = records.StormBase(
                name=name,
                status=records.ACTIVE,
                owner=header.owner,
                digest=stored.digest,
                launch_time_ms=int(self._wall_s() * 1000),
                num_workers=max(header.num_workers, 1),
                config_json=header.config_json,
                package_size=stored.size,
                client_request_id=header.client_request_id,
                components_json=json.dumps(components, separators=(",", ":")) if components else "",
                component_parallelism={c["name"]: int(c["parallelism"]) for c in components},
            )
            stamp_epoch(base, writer.token.epoch)
            writer.batch(
                [
                    Create(self._paths.storm(new_id), base.SerializeToString(deterministic=True)),
                    Create(self._paths.name(name), new_id.encode()),
                    *remember(
                        self._paths,
                        header.client_request_id,
                        method="SubmitTopology",
                        topology_id=new_id,
                        epoch=writer.token.epoch,
                    ),
                ]
            )
        except WriteOutcomeUnknown as e:
            # It may have landed: leave the registrations; GC or a read-back settles it.
            raise ApiError(
                grpc.StatusCode.UNAVAILABLE,
                f"lost ZooKeeper while publishing {new_id}; its outcome is unknown, "
                f"check with `nimbus describe {name}`",
            ) from e
        except WriteConflictError as e:
            self._abandon(new_id, own_node, writer)
            return self._replay_or_taken(header.client_request_id, name, writer, cause=e)
        except Exception:
            self._abandon(new_id, own_node, writer)
            raise
        log.info("accepted %s (%s) held by %s", new_id, stored.digest[:12], ", ".join(holders))
        return pb.SubmitTopologyResponse(
            topology_id=new_id,
            name=name,
            epoch=writer.token.epoch,
            digest=stored.digest,
            code_replicas=holders,
        )

    def learn(self, record: records.StormBase) -> None:
        """Keep the verdict a leader recorded for a topology (its graph, from the check
        it ran before writing the record): a package submitted again with the same config
        is the same topology, so a new leader need not run the check again. After a
        failover the retried submit of a package the cluster already ran is then as quick
        as on the old leader (the check is a child Python process, 0.5-1 s)."""
        if not record.components_json:  # checks off at that leader: nothing to trust
            return
        try:
            components = json.loads(record.components_json)
        except ValueError:
            return
        if isinstance(components, list) and components:
            self._keep_verdict((record.digest, record.config_json), components)

    def _keep_verdict(self, key: tuple[str, str], components: list[dict[str, Any]]) -> None:
        with self._verdicts_guard:
            self._verdicts.pop(key, None)  # newest last: the oldest leaves first
            if len(self._verdicts) >= VERDICTS_KEPT:
                self._verdicts.pop(next(iter(self._verdicts)))
            self._verdicts[key] = components

    # -- steps --------------------------------------------------------------------------

    def _check(self, name: str, digest: str, config_json: str) -> list[dict[str, Any]]:
        """Run the package's ``build()`` and the topology validation, sandboxed (see
        ``nimbus.duties.package_check``); the graph it returns is kept in the record."""
        if self._config.validate_timeout == 0:
            return []
        key = (digest, config_json)
        with self._verdicts_guard:
            cached = self._verdicts.get(key)
            if cached is not None:
                return cached  # same bytes and config, same topology: not redone
            one_at_a_time = self._checking.setdefault(key, threading.Lock())
        with one_at_a_time:  # concurrent submits (retries) of one package share one check
            cached = self._verdicts.get(key)
            if cached is not None:
                return cached
            try:
                components = self._run_check(name, digest, config_json)
            finally:
                with self._verdicts_guard:
                    self._checking.pop(key, None)
            self._keep_verdict(key, components)
            return components

    def _run_check(self, name: str, digest: str, config_json: str) -> list[dict[str, Any]]:
        limits = CheckLimits(self._config.validate_timeout, self._config.validate_memory_mib)
        try:
            components = check_package(self._store.path(digest), limits, config_json)
        except PackageInvalid as e:
            where = f" (component {e.component!r})" if e.component else ""
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT, f"topology {name!r} refused{where}: {e}"
            ) from e
        except PackageCheckFailed as e:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"topology {name!r}: {e}") from e
        except OSError as e:
            raise ApiError(
                grpc.StatusCode.UNAVAILABLE, f"could not run the topology check: {e}"
            ) from e
        return components

    def _writer(self) -> FencedWriter:
        writer = self._current_writer()
        if writer is None or writer.token.cancelled:
            raise NotLeaderError("this replica is not the leader")
        return writer

    @staticmethod
    def _header(requests: Iterator[pb.SubmitTopologyRequest]) -> pb.SubmitHeader:
        first = next(requests, None)
        if first is None or first.WhichOneof("item") != "header":
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "the first message of SubmitTopology must be the header",
            )
        return first.header

    def _replay_or_taken(
        self, request_id: str, name: str, writer: FencedWriter, cause: Exception | None = None
    ) -> pb.SubmitTopologyResponse:
        """The name is taken. By this very request (its first attempt landed while this one
        ran, or a concurrent retry won the race): its outcome. By another: ALREADY_EXISTS."""
        first = self._replay(request_id, writer)
        if first is not None:
            return first
        raise ApiError(
            grpc.StatusCode.ALREADY_EXISTS, f"a topology named {name!r} is live"
        ) from cause

    def _replay(self, request_id: str, writer: FencedWriter) -> pb.SubmitTopologyResponse | None:
        try:
            outcome = recall_committed(
                self._client, self._paths, writer, request_id,
                effects=self._created_by, on_divergent=self._on_divergent,
            )  # fmt: skip
        except UnconfirmedError as e:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, str(e)) from e
        if outcome is None:
            return None
        reply = pb.SubmitTopologyResponse(topology_id=outcome.topology_id, epoch=outcome.epoch)
        try:
            base = records.StormBase.FromString(
                self._client.get(self._paths.storm(outcome.topology_id))[0]
            )
        except (KazooException, DecodeError):
            return reply  # already killed and removed: the first outcome still stands
        reply.name, reply.digest = base.name, base.digest
        reply.code_replicas.extend(
            read_holders_of(self._client, self._paths, outcome.topology_id).replicas
        )
        return reply

    def _created_by(self, first: records.RequestOutcome) -> list[str]:
        """What a submit's transaction created besides its record: the topology's record
        and its name (read from the record, when our server shows it)."""
        storm = self._paths.storm(first.topology_id)
        try:
            name = records.StormBase.FromString(self._client.get(storm)[0]).name
        except (KazooException, DecodeError):
            return [storm]
        return [storm, self._paths.name(name)] if name else [storm]

    def _new_id(self, name: str) -> str:
        with self._counter_lock:
            while True:
                self._counter += 1
                candidate = topology_id(name, self._counter, int(self._wall_s()))
                taken = self._client.exists(self._paths.storm(candidate)) or self._client.exists(
                    self._paths.code_holders(candidate)
                )
                if not taken:
                    return candidate

    def required_copies(self) -> int:
        """``--min-replicas``, or by default 2 (1 while this replica is the only one live):
        counted from ``/nimbuses`` at each submit, so a cluster of three started without
        any flag still waits for a second copy, and a lone replica can still accept."""
        if self._config.min_replicas:
            return self._config.min_replicas
        return max(1, min(2, len(live_replicas(self._client, self._paths))))

    def replication_wait(self) -> float:
        """``--replication-wait``, longer while ZooKeeper is slow: a follower's copy takes
        a few writes and reads (its holder node, our watch), each waiting for ZooKeeper's
        disk, and a slow disk must slow a submit down, not abort it. At most half the
        grace before an unactivated package is collected."""
        slow = min(WAIT_PER_LATENCY * self._zk_latency(), self._config.gc_grace / 2)
        return max(self._config.replication_wait, slow)

    def _await_replicas(self, new_id: str, digest: str, writer: FencedWriter) -> list[str]:
        """Block until the required replicas hold the package, leadership permitting.

        The followers pull it; those still without it after ``push_delay`` get it pushed
        (``code_sync.pusher``): over our own connections, which a rule refusing the other
        replicas on our port leaves open.
        """
        required = self.required_copies()
        changed = threading.Event()
        done = threading.Event()
        current: list[str] = []

        def on_children(children: list[str]) -> bool | None:
            current[:] = children
            changed.set()
            return False if done.is_set() else None

        ChildrenWatch(self._client, self._paths.code_holders(new_id), on_children)
        wait = self.replication_wait()
        deadline = time.monotonic() + wait
        push_at = time.monotonic() + push_delay(wait)
        pushes = self._push_round(new_id, digest)
        acknowledged = False
        try:
            while len(current) < required:
                if writer.token.cancelled:
                    raise NotLeaderError(f"leadership ended ({writer.token.why})")
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    raise ApiError(
                        grpc.StatusCode.ABORTED,
                        f"only {len(current)} of the required {required} "
                        f"replicas hold the code after {wait:g}s; "
                        "the topology was not activated",
                    )
                if now >= push_at:
                    self._push(pushes, set(current), remaining)
                    push_at = now + PUSH_RETRY_S
                changed.wait(min(remaining, 0.5))
                changed.clear()
            acknowledged = True
            return sorted(current)
        finally:
            done.set()
            pushes.close(cancel=not acknowledged)

    def _push(self, pushes: PushRound, holders: set[str], remaining: float) -> None:
        """Push to every live replica not registered as a holder yet (none in flight)."""
        try:
            live = live_replicas(self._client, self._paths)
        except KazooException as e:  # the wait loop sees real trouble; try at the next offer
            log.info("no push this time, cannot list the replicas: %s", e)
            return
        targets = live - holders - {self._config.replica_id}
        pushes.offer(targets, timeout=max(remaining, 1.0))

    def _abandon(self, new_id: str, own_node: str, writer: FencedWriter) -> None:
        """Leave nothing half-made: drop every holder registration of ``new_id``."""
        try:
            writer.delete_recursive(self._paths.code_holders(new_id))
        except (NotLeaderError, WriteConflictError, WriteOutcomeUnknown, KazooException) as e:
            log.info("could not remove holders of abandoned %s: %s", new_id, e)
            try:
                self._membership.release(own_node)
            except Exception as inner:  # best effort; the replica's GC drops it later
                log.info("could not unregister %s: %s", own_node, inner)
