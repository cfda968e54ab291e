"""The standard gRPC health service, computed live on every Check.

The empty name is SERVING while this replica has a fresh word from ZooKeeper and its
elector runs (what Kubernetes probes: a replica that can never lead gets restarted);
``nimbus.leader`` is SERVING only on the leader, for proxies that health-check each
backend. Computing on each call (not only on events) means a replica that just woke
from a pause answers NOT_SERVING before kazoo noticed.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2

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
    ) -> None:
        super().__init__()
        self._connected = connected
        self._is_leader = is_leader
        self._running = running
        self.refresh()

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

    def refresh(self) -> None:
        """Push the current status to Watch streams (call on every state change)."""
        for service in ("", LEADER_SERVICE):
            status = self._status(service)
            assert status is not None
            self.set(service, status)
