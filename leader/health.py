"""The standard gRPC health service, computed live on every Check.

The empty name is SERVING while this replica has a fresh word from ZooKeeper and its
elector runs (what Kubernetes probes: a replica that can never lead gets restarted);
``nimbus.leader`` is SERVING only on the leader, for proxies that health-check each
backend. Computing on each call (not only on events) means a replica that just woke
from a pause answers NOT_SERVING before kazoo noticed.

A Watch stream sends a status when it changes, and some changes are no event: a leader's
claim lapses when no acknowledged beat renewed it (DESIGN item 8), which nobody is told.
So while a Watch is open the status is looked at again every ``recheck`` seconds (the beat
interval: a claim is looked at that often for the pod label too), and a Watch sees a
lapsed claim as NOT_SERVING within about that, and SERVING again once the claim is back.
With no Watch open nothing runs. Only a change is sent: the base class sends every
``set``, and a stream would otherwise repeat its status every look.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2

from leader.settings import DEFAULT_BEAT_INTERVAL

log = logging.getLogger(__name__)

LEADER_SERVICE = "nimbus.leader"

_SERVING: int = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING: int = health_pb2.HealthCheckResponse.NOT_SERVING


class NimbusHealth(health.HealthServicer):
    def __init__(
        self,
        *,
        connected: Callable[[], bool],
        is_leader: Callable[[], bool],
        running: Callable[[], bool] = lambda: True,
        recheck: float = DEFAULT_BEAT_INTERVAL,
    ) -> None:
        super().__init__()
        self._connected = connected
        self._is_leader = is_leader
        self._running = running
        self._recheck = recheck
        self._refreshing = threading.Lock()  # a look and its push, one at a time
        self._pushed: dict[str, int] = {}
        self._watching = threading.Condition()
        self._watches = 0
        self._looking = False  # the thread that looks again while Watches are open runs
        self.refresh()

    def ready(self) -> bool:
        """What Kubernetes' readiness probe sees (the empty name SERVING); the metrics export it."""
        return self._status("") == _SERVING

    def _status(self, service: str) -> int | None:
        if service == "":
            return _SERVING if self._connected() and self._running() else _NOT_SERVING
        if service == LEADER_SERVICE:
            return _SERVING if self._is_leader() else _NOT_SERVING
        return None

    def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        status = self._status(request.service)
        if status is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(
        self,
        request: health_pb2.HealthCheckRequest,
        context: grpc.ServicerContext,
        send_response_callback: Callable[[health_pb2.HealthCheckResponse | None], None]
        | None = None,
    ) -> object:
        self.refresh()  # the first answer is today's status, not the last event's
        if context.add_callback(self._watch_ended):
            with self._watching:
                self._watches += 1
                start, self._looking = not self._looking, True
            if start:
                threading.Thread(
                    target=self._look_while_watched, name="health-watch", daemon=True
                ).start()
        return super().Watch(request, context, send_response_callback)

    def refresh(self) -> None:
        """Push the current status to Watch streams, where it changed (call on every state
        change; Watches also get a look every ``recheck``)."""
        with self._refreshing:
            for service in ("", LEADER_SERVICE):
                status = self._status(service)
                assert status is not None
                if self._pushed.get(service) != status:
                    self._pushed[service] = status
                    self.set(service, status)

    def _watch_ended(self) -> None:
        with self._watching:
            self._watches -= 1
            self._watching.notify_all()

    def _look_while_watched(self) -> None:
        while True:
            with self._watching:
                if self._watches == 0:
                    self._looking = False
                    return
                self._watching.wait(self._recheck)
            try:
                self.refresh()
            except Exception:  # a failed look costs one look, never the thread
                log.exception("looking at the health status failed")
