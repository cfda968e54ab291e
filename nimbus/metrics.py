"""Prometheus metrics of a replica or a supervisor, and the HTTP endpoint that serves them.

Each process object gets a registry of its own instead of prometheus-client's global one:
every exported name then starts with ``nimbus_`` (the global registry adds ``python_*``),
and tests can run several daemons in one interpreter. Values that are state (leader,
epoch, lag) are read when scraped, so a scrape can never show a stale gauge.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cluster.errors import NimbusError
from leader.heartbeat import BeatAck

PREFIX = "nimbus"

#: Results a fenced write is counted under (``nimbus_fenced_writes_total{result=...}``).
FENCED_RESULTS = ("ok", "not_leader", "conflict", "unknown")

# gRPC calls here are sub-millisecond to seconds (a submit waits for replication).
_GRPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30)
# A beat's round trip is a ZooKeeper write: milliseconds on a healthy ensemble, one or two
# fsyncs (0.45-2 s, DESIGN item 9) on a slow disk. 0.5 s is a bound: the slow-ZooKeeper
# alert (deploy/prometheus/rules.yaml) reads the share of beats above it.
_BEAT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8)


class MetricsError(NimbusError):
    """The metrics endpoint could not be served (port taken, bad address)."""


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    ProcessCollector(namespace=PREFIX, registry=registry)  # nimbus_process_* (RSS, CPU, fds)
    return registry


class DownloadCounter:
    """Counts package bytes received from peers; made before the metrics that report it,
    so the code syncer can be built first and the metrics wired to it afterwards."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[int], None]] = []

    def on_bytes(self, listener: Callable[[int], None]) -> None:
        self._listeners.append(listener)

    def count(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        """Pass ``chunks`` through, telling every listener their sizes."""
        for chunk in chunks:
            for listener in self._listeners:
                listener(len(chunk))
            yield chunk


class ReplicaMetrics:
    """What one Nimbus replica exports. The daemon passes the live state as callables."""

    def __init__(
        self,
        *,
        replica_id: str,
        is_leader: Callable[[], bool],
        leader_epoch: Callable[[], int],
        connected: Callable[[], bool],
        missing_packages: Callable[[], int],
        ready: Callable[[], bool],
        downloaded_bytes: DownloadCounter | None = None,
    ) -> None:
        self.registry = _registry()
        r = self.registry
        self._failing = _FailingCollector()
        r.register(self._failing)
        Gauge(
            "nimbus_replica_info", "Always 1; labels name this replica", ["replica"], registry=r
        ).labels(replica=replica_id).set(1)
        Gauge(
            "nimbus_is_leader", "1 while this replica leads (live token, fresh lease)", registry=r
        ).set_function(lambda: 1.0 if is_leader() else 0.0)
        Gauge(
            "nimbus_leader_epoch",
            "Epoch of the current leader as this replica knows it (0: none known)",
            registry=r,
        ).set_function(lambda: float(leader_epoch()))
        Gauge(
            "nimbus_zookeeper_connected",
            "1 while connected with a fresh word from ZooKeeper (the readiness condition)",
            registry=r,
        ).set_function(lambda: 1.0 if connected() else 0.0)
        Gauge(
            "nimbus_ready",
            "1 while the gRPC health service's empty name is SERVING (Kubernetes readiness): "
            "connected with a fresh word from ZooKeeper and the elector running",
            registry=r,
        ).set_function(lambda: 1.0 if ready() else 0.0)
        Gauge(
            "nimbus_code_missing_packages",
            "Topologies in /storms whose code this replica lacked at its last sync pass",
            registry=r,
        ).set_function(lambda: float(missing_packages()))
        self.leadership_changes = Counter(
            "nimbus_leadership_changes",
            "Terms this replica began (elected) or ended (deposed)",
            ["change"],
            registry=r,
        )
        self.fenced_writes = Counter(
            "nimbus_fenced_writes",
            "Fenced multi-ops by result: ok, not_leader (refused or check failed, nothing "
            "written), conflict (target op failed, nothing written), unknown (connection lost)",
            ["result"],
            registry=r,
        )
        self.preemptions = Counter(
            "nimbus_preemptions",
            "Dead leaders this replica preempted (deleted their lock node on evidence)",
            registry=r,
        )
        self.zookeeper_server_moves = Counter(
            "nimbus_zookeeper_server_moves",
            "Moves of this replica's ZooKeeper session off a server seen behind its quorum, "
            "by the suspect server",
            ["server"],
            registry=r,
        )
        self.code_sync_bytes = Counter(
            "nimbus_code_sync_bytes",
            "Package bytes received from peer replicas by code sync",
            registry=r,
        )
        self.grpc_requests = Counter(
            "nimbus_grpc_requests",
            "gRPC calls served, by full method name and status code",
            ["method", "code"],
            registry=r,
        )
        self.grpc_seconds = Histogram(
            "nimbus_grpc_request_duration_seconds",
            "gRPC call duration on the server, by method and status code",
            ["method", "code"],
            buckets=_GRPC_BUCKETS,
            registry=r,
        )
        self.beat_latency = Histogram(
            "nimbus_beat_latency_seconds",
            "Round trip of this replica's acknowledged beats: reply time minus send time",
            buckets=_BEAT_BUCKETS,
            registry=r,
        )
        if downloaded_bytes is not None:
            downloaded_bytes.on_bytes(self.code_sync_bytes.inc)
        for change in ("elected", "deposed"):
            self.leadership_changes.labels(change=change)
        for result in FENCED_RESULTS:
            self.fenced_writes.labels(result=result)

    # -- hooks the daemon wires -----------------------------------------------------------

    def elected(self) -> None:
        self.leadership_changes.labels(change="elected").inc()

    def deposed(self) -> None:
        self.leadership_changes.labels(change="deposed").inc()

    def beat_acked(self, ack: BeatAck) -> None:
        self.beat_latency.observe(max(0.0, ack.acked - ack.sent))

    def topologies_failing(self, counts: Mapping[str, int], term: Term) -> None:
        """The leader's scheduler pass counted these (reason -> topologies) during ``term``;
        exported until the term ends (a follower exports no figure: it reads no heartbeat)."""
        self._failing.report(dict(counts), term)

    def preempted(self, evidence: str) -> None:
        self.preemptions.inc()

    def left_zookeeper_server(self, suspect: str) -> None:
        self.zookeeper_server_moves.labels(server=suspect).inc()

    def fenced_write(self, result: str) -> None:
        self.fenced_writes.labels(result=result).inc()

    def grpc_call(self, method: str, code: str, seconds: float) -> None:
        self.grpc_requests.labels(method=method, code=code).inc()
        self.grpc_seconds.labels(method=method, code=code).observe(seconds)


class Term(Protocol):
    """A leadership term as the metrics see it (``fencing.LeadershipToken``)."""

    @property
    def cancelled(self) -> bool: ...


class _FailingCollector(Collector):
    """``nimbus_topologies_failing{reason}``: the last figures of a term still running, or
    nothing. A deposed leader's last pass must not stay on show as if it were current."""

    def __init__(self) -> None:
        self._last: tuple[dict[str, int], Term] | None = None

    def report(self, counts: dict[str, int], term: Term) -> None:
        self._last = (counts, term)  # one reference swap: a scrape sees old or new, whole

    def collect(self) -> Iterable[Metric]:
        last = self._last
        if last is None or last[1].cancelled:
            return
        family = GaugeMetricFamily(
            "nimbus_topologies_failing",
            "Topologies not doing their work, by reason: worker (a worker failed with no batch "
            "committed since, what `nimbus list` shows as failing), code_missing (status "
            "CODE_MISSING). Exported by the leader only, from its scheduler's last pass",
            labels=["reason"],
        )
        for reason, count in sorted(last[0].items()):
            family.add_metric([reason], count)
        yield family


class WorkerTable(Protocol):
    """What a supervisor shows its metrics: its id and (workers running, restarts so far)."""

    id: str

    def worker_counts(self) -> tuple[int, int]: ...


class SupervisorMetrics:
    """What one supervisor exports: its workers, read from its table at scrape time."""

    def __init__(self, supervisor: WorkerTable) -> None:
        self.registry = _registry()
        Gauge(
            "nimbus_supervisor_info", "Always 1; labels name this supervisor", ["supervisor"],
            registry=self.registry,
        ).labels(supervisor=supervisor.id).set(1)  # fmt: skip
        self.registry.register(_WorkerCollector(supervisor.worker_counts))


class _WorkerCollector(Collector):
    """Both figures come from one read of the table, so they are consistent."""

    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        running, restarts = self._counts()
        yield GaugeMetricFamily(
            "nimbus_supervisor_workers_running",
            "Worker processes of this supervisor running now",
            value=running,
        )
        yield CounterMetricFamily(
            "nimbus_supervisor_worker_restarts",
            "Times a worker of this supervisor exited unasked and was scheduled to restart",
            value=restarts,
        )


def serve_supervisor_metrics(
    supervisor: WorkerTable, port: int, host: str = "0.0.0.0"
) -> MetricsServer:
    return MetricsServer(SupervisorMetrics(supervisor).registry, host, port)


class MetricsServer:
    """``/metrics`` over HTTP on its own thread; ``stop()`` frees the port."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: they double the output for nothing
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise MetricsError(f"cannot serve metrics on {host}:{port}: {e}") from e
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.port: int = server.server_port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
