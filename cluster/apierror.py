"""An error meant for the gRPC caller: a status code and a message naming the problem."""

from __future__ import annotations

import grpc

from cluster.errors import NimbusError


class ApiError(NimbusError):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
