"""One Nimbus replica: wires ZooKeeper, leadership, discovery and the gRPC server.

Fail-fast and stateless beyond ZooKeeper and the local code store, so kill -9 and a
restart are harmless. ``stop()`` is the graceful hand-over SIGTERM triggers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial

from grpc_health.v1 import health_pb2_grpc
from kazoo.client import KazooClient, KazooState

from cluster.api import records, rpc
from cluster.ensemble_listing import check_servers_listed
from cluster.errors import ConfigError
from cluster.factory import connect, make_grpc_server, make_kazoo_client
from cluster.quorum_probe import probe_for
from cluster.recordcache import RecordCache
from cluster.security import client as client_security
from cluster.security.zkauth import warn_if_open
from cluster.server_move import ServerMover
from cluster.session_pin import SessionPin
from code_sync.duty import CodeMissingDuty
from code_sync.peer import fetch_from_peer
from code_sync.store import CodeStore
from code_sync.syncer import CodeSyncer
from fencing import FencedWriter, LeadershipToken, ensure_folders
from leader.discovery import LeaderCache
from leader.elector import Elector
from leader.health import NimbusHealth
from leader.registry import Registry
from leader.settings import ElectorCallbacks, ElectorSettings
from leader.silence_watch import SilenceWatch
from nimbus.config import NimbusConfig, parse_address
from nimbus.duties.handover import StepAside
from nimbus.duties.lifecycle import LifecycleDuty
from nimbus.duties.scheduler import SchedulerDuty
from nimbus.metrics import DownloadCounter, MetricsServer, ReplicaMetrics
from nimbus.server.forward import Forwarder
from nimbus.server.grpc_errors import ErrorInterceptor
from nimbus.server.grpc_metrics import MetricsInterceptor
from nimbus.server.podlabel import PodApi, PodLabeler
from nimbus.server.security.credentials import CredentialsDuty
from nimbus.server.security.server import load_server_security
from nimbus.server.servicer import NimbusServicer
from nimbus.server.stall_move import follow_stalls
from nimbus.server.topology_api import make_topology_api
from nimbus.server.ui import WebUi
from nimbus.server.zkcheck import check_session_timeout

log = logging.getLogger(__name__)

CODE_DOWNLOAD_TIMEOUT = 300.0  # seconds for one package from one peer


class _Steps:
    """Seconds each start-up step took, for one log line (a slow start says where)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._spent: list[tuple[str, float]] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self._spent.append((step, now - self._last))
        self._last = now

    def __str__(self) -> str:
        total = sum(s for _, s in self._spent)
        return f"{total:.2f}s (" + ", ".join(f"{n} {s:.2f}s" for n, s in self._spent) + ")"


class NimbusDaemon:
    """One replica. The parts are built in dependency order, each from parts built before
    it; ``start()`` starts them in order and, if one fails, stops those already running."""

    def __init__(
        self, config: NimbusConfig, *, has_all_code: Callable[[], bool] | None = None
    ) -> None:
        self.config = config
        self.paths = config.paths
        self.security = load_server_security(
            zk_auth_file=config.zk_auth_file,
            zk_world_readable=config.zk_world_readable,
            tls_cert=config.tls_cert,
            tls_key=config.tls_key,
            tls_client_ca=config.tls_client_ca,
            tls_ca=config.tls_ca,
            tls_server_name=config.tls_server_name,
            token_file=config.token_file,
            auth_reads=config.auth_reads,
        )
        client_security.set_default(self.security.peer)  # peer code downloads
        self.client: KazooClient = make_kazoo_client(
            config.zookeeper, session_timeout=config.session_timeout, auth=self.security.zk_auth
        )
        # Bulk reads get a session of their own. ZooKeeper answers one session's requests
        # in order and kazoo runs one session's callbacks on one thread: 10,000 record
        # reads on the election session put every step of a failover (the lock's watch,
        # its listing, take-office) behind them. Only reads travel here, on the election
        # session's server (``SessionPin``); the view may lag by the events in flight, so
        # the scheduler checks a record's version as it writes from it.
        self.bulk_client: KazooClient = make_kazoo_client(
            config.zookeeper, session_timeout=config.session_timeout, auth=self.security.zk_auth
        )
        self.session_pin = SessionPin(self.client, self.bulk_client)
        self.cache = LeaderCache(self.client, self.paths)
        self.store = CodeStore(config.code_dir, max_package_bytes=config.max_package_bytes)
        self.storms = RecordCache(self.bulk_client, self.paths.storms, records.StormBase.FromString)
        self.downloads = DownloadCounter()
        self.syncer = CodeSyncer(
            self.client,
            self.paths,
            config.replica_id,
            self.store,
            self.storms,
            interval=config.sync_interval,
            gc_grace=config.gc_grace,
            code_wait=config.code_wait,
            on_change=self._code_changed,
            fetch=lambda address, digest: self.downloads.count(
                fetch_from_peer(address, digest, timeout=CODE_DOWNLOAD_TIMEOUT)
            ),
        )
        self._writer: FencedWriter | None = None
        step_aside = StepAside(self.client, self.paths, config.replica_id)
        self.elector = Elector(
            self.client,
            ElectorSettings(
                paths=self.paths,
                replica_id=config.replica_id,
                session_timeout=config.session_timeout,
                beats=config.beats,
            ),
            ElectorCallbacks(
                has_all_code=has_all_code or self.syncer.gate.request_all_code,
                gate_given=None if has_all_code else self.syncer.gate.request_all_code,
                on_elected=self._elected,
                on_deposed=self._deposed,
                leader_hint=self._leader_hint,
                taking_office=self.storms.hold_back,  # a restart's record load steps aside
                on_stale_server=lambda why: self.server_mover.move(why),  # made below
                step_aside=step_aside,
                step_aside_given=step_aside.given,
                # slow or lost? the bulk session (same server) answers a read while beats wait
                probe=lambda: self.bulk_client.exists_async(self.paths.root),
            ),
        )
        self.health = NimbusHealth(
            connected=self._connected,
            is_leader=self.elector.is_leader,
            running=self._running,
            recheck=config.beats.interval,  # a Watch sees a lapsed claim within a beat
        )
        self.metrics = ReplicaMetrics(
            replica_id=config.replica_id,
            is_leader=self.elector.is_leader,
            leader_epoch=self.leader_epoch,
            connected=self._connected,
            missing_packages=lambda: self.syncer.lag,
            ready=self.health.ready,
            downloaded_bytes=self.downloads,
        )
        # At most one move per silence window; the suspect is left out for a session
        # timeout, long enough for a server that diverged to be noticed by its peers.
        self.server_mover = ServerMover(
            self.client,
            min_interval=max(config.beats.silence_window, 1.0),
            quarantine=max(config.session_timeout, 10.0),
            on_move=lambda move: self.metrics.left_zookeeper_server(move.suspect),
            probe=probe_for(self.client, config.session_timeout),
        )
        self.silence = SilenceWatch(
            self.client,
            self.paths,
            config.replica_id,
            self.cache,
            self.elector.queued_node,
            config.beats,
            timeout=config.session_timeout,
            heard_dead_after=config.preempt_window,
            link_retry=config.preempt_interval,
            on_preempt=self.metrics.preempted,
            on_stale_server=self.server_mover.move,
            draft=self.elector.draft_office,  # the holder's preemption takes office too
            fold=self.elector.fold,
        )
        self.elector.on_beat(self.silence.beat_acked)
        self.elector.on_beat(self.metrics.beat_acked)  # nimbus_beat_latency_seconds
        # A beat held on a live connection: our server holds writes (cut from its quorum,
        # it keeps its clients for syncLimit); move, if it is slower than the others.
        follow_stalls(self.elector, self.server_mover, config.beats, config.session_timeout)
        self.registry = Registry(
            self.client,
            self.paths,
            config.replica_id,
            start_time_ms=int(time.time() * 1000),
            timeout=config.session_timeout,
            sync_lag=lambda: self.syncer.lag,
        )
        self.server, self.port = make_grpc_server(
            config.listen,
            interceptors=[
                MetricsInterceptor(self.metrics.grpc_call),
                *self.security.interceptors(),
                ErrorInterceptor(),  # innermost: the others see the status it maps
            ],
            tls=self.security.tls,
        )
        api = make_topology_api(
            self.client, self.bulk_client, config, self.store, self.storms,
            current_writer=self._current_writer, on_divergent_server=self.server_mover.move,
            receiver=self.syncer.push_receiver, zk_latency=self.elector.beat_latency,
        )  # fmt: skip
        rpc.add_NimbusServicer_to_server(
            NimbusServicer(
                replica_id=config.replica_id,
                elector=self.elector,
                cache=self.cache,
                api=api,
                forwarder=Forwarder(config.replica_id, client_security.default),
            ),
            self.server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.pod_labeler = PodLabeler(PodApi.in_cluster(config.k8s_pod)) if config.k8s_pod else None
        self.ui: WebUi | None = None
        self._metrics_server: MetricsServer | None = None
        self._started: list[Callable[[], None]] = []  # how to stop each started part, in order
        self._stopped = threading.Event()

    def start(self) -> None:
        try:
            self._start_parts()
        except BaseException:
            self._stop_started()
            raise
        log.info("replica %s serving gRPC on port %d", self.config.replica_id, self.port)

    def _start_parts(self) -> None:
        if self.config.ui_port:  # bind first: a taken port fails before anything runs
            self._start_ui()
        if self.config.metrics_port:  # first: a taken port fails before anything else runs
            host = parse_address(self.config.listen, "--listen")[0].strip("[]")
            self._metrics_server = MetricsServer(
                self.metrics.registry, host, self.config.metrics_port
            )
            self._started.append(self._metrics_server.stop)
        if self.pod_labeler is not None:
            self.pod_labeler.start()
            self._started.append(self.pod_labeler.stop)
            self.pod_labeler.set_role("follower")  # a restarted leader's pod drops the label
            # The claim lapses L after the last acknowledged beat: look at it each beat.
            self.pod_labeler.follow_claim(
                self.elector.is_leader, self._stopped, self.config.beats.interval
            )
        steps = _Steps()
        self._connect()
        steps.done("zookeeper")
        self.client.add_listener(self._on_state)
        ensure_folders(self.client, self.paths.folders())
        warn_if_open(self.client, self.config.root, self.security.zk_auth)
        self.config.code_dir.mkdir(parents=True, exist_ok=True)
        self.cache.add_listener(self.health.refresh)
        self.cache.start()
        self.storms.start()  # loads in the background; the first sync pass waits for it
        primed = self.syncer.prime()
        steps.done(f"code index ({primed} held)")
        self.registry.start()
        self._started.append(self.registry.stop)
        self.server.start()
        self._started.append(self._stop_server_now)
        if self.ui is not None:
            self.ui.start()
            self._started.append(self.ui.stop)
        steps.done("serving")
        self.syncer.start()
        self.syncer.request_pass()  # a full pass at once, in the background
        self._started.append(self.syncer.stop)
        self.elector.start()
        self.silence.start()
        self._started.append(self.silence.stop)
        log.info("started in %s", steps)

    def _connect(self) -> None:
        connect(self.client, self.config.zookeeper, self.config.connect_timeout)
        self._started.append(lambda: _close(self.client))
        check_session_timeout(self.client, self.config.session_timeout)
        check_servers_listed(self.client, self.config.zookeeper)  # moves and pins need them
        # The bulk session reads the history ours writes: pinned, and following every move
        # of ours from here on, its own first connection included.
        self.session_pin.start()
        self._started.append(self.session_pin.stop)
        connect(self.bulk_client, self.config.zookeeper, self.config.connect_timeout)
        self._started.append(lambda: _close(self.bulk_client))

    def _stop_server_now(self) -> None:
        self.server.stop(0).wait(1)

    def _stop_started(self) -> None:
        """After a failed start: stop what did start, newest first, whatever each says."""
        while self._started:
            stop = self._started.pop()
            try:
                stop()
            except Exception:
                log.exception("stopping a part after a failed start")

    def stop(self, grace: float = 2.0) -> None:
        """Graceful: hand over leadership first, then leave, then stop serving."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.elector.stop()  # first: the next replica leads while we stop the rest
        if self.ui is not None:
            self.ui.stop()
        self.silence.stop()
        self.server_mover.stop()
        self.syncer.stop()
        self.health.refresh()
        self.registry.stop()
        self.server.stop(grace).wait(grace + 1)
        self.session_pin.stop()
        _close(self.client)
        _close(self.bulk_client)
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self.pod_labeler is not None:
            self.pod_labeler.stop()

    def leader_epoch(self) -> int:
        """The current leader's epoch as this replica knows it; 0 while none is known."""
        if self.elector.is_leader():
            return self.elector.epoch
        leader = self.cache.leader()
        return leader.epoch if leader is not None else 0

    def known_epoch(self) -> int:
        """The highest epoch this replica knows of (its own last term included): for logs."""
        return max(self.elector.epoch, self.leader_epoch())

    def _start_ui(self) -> None:
        host = self.config.listen.rpartition(":")[0].strip("[]")
        self.ui = WebUi(
            self.client,
            paths=self.paths,
            replica_id=self.config.replica_id,
            host=host,
            port=self.config.ui_port,
            leader_cache=self.cache,
            storms=self.storms,
            store=self.store,
            connected=self._connected,
        )
        try:
            self.ui.bind()
        except OSError as e:
            raise ConfigError(f"--ui-port {self.config.ui_port}: {e.strerror or e}") from e

    # -- callbacks ------------------------------------------------------------------------

    def _running(self) -> bool:
        """The elector runs: without it this replica can never lead, so it is not healthy."""
        return self.elector.running

    def _connected(self) -> bool:
        return self.client.state == KazooState.CONNECTED and self.elector.lease.valid()

    def _leader_hint(self) -> str | None:
        leader = self.cache.leader()
        return leader.address if leader else None

    def _current_writer(self) -> FencedWriter | None:
        writer = self._writer
        return writer if writer is not None and self.elector.is_leader() else None

    def _code_changed(self) -> None:
        self.registry.refresh()
        self.elector.code_changed()

    def _elected(self, epoch: int, token: LeadershipToken, writer: FencedWriter) -> None:
        # No wait for the record cache: a replica restarted moments ago may still be
        # loading it, and every duty is safe on a partial view (a record not seen yet is
        # neither scheduled away nor removed; removals are confirmed by a read).
        log.info("leading with epoch %d", epoch)
        writer.observer = self.metrics.fenced_write
        self.metrics.elected()
        if self.pod_labeler is not None and self.elector.is_leader():  # a claim, not the term
            self.pod_labeler.set_role("leader")
        self._writer = writer
        CodeMissingDuty(
            self.client,
            self.paths,
            self.config.replica_id,
            self.syncer,
            writer,
            interval=self.config.sync_interval,
        ).start()
        LifecycleDuty(
            self.client,
            self.paths,
            writer,
            interval=self.config.sync_interval,
            storms=self.storms.items,
        ).start()
        SchedulerDuty(
            self.client,
            self.paths,
            writer,
            interval=self.config.schedule_interval,
            heartbeat_timeout=self.config.heartbeat_timeout,
            storms=self.storms.versioned_items,
            subscribe_storms=self.storms.subscribe,
            on_failing=partial(self.metrics.topologies_failing, term=token),
        ).start()
        if self.security.zk_auth is not None:  # per-topology identities need ZooKeeper auth
            CredentialsDuty(
                self.client,
                self.paths,
                self.security.zk_auth,
                writer,
                storms=self.storms.items,
                interval=self.config.sync_interval,
            ).start()
        self.registry.set_role(is_leader=True, epoch=epoch)
        self.health.refresh()

    def _deposed(self, reason: str) -> None:
        log.warning("no longer leading: %s", reason)
        self.metrics.deposed()
        if self.pod_labeler is not None:
            self.pod_labeler.set_role("follower")
        self._writer = None
        self.registry.set_role(is_leader=False, epoch=self.elector.epoch)
        self.health.refresh()

    def _on_state(self, state: str) -> None:
        self.health.refresh()


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()
