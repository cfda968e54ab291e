"""A follower forwards a leader-only call to the leader, when the client asks it to.

Why: a client cut from the leader (a network policy, a partition between the client's
zone and the leader's) still reaches the followers, and they still reach the leader.
Instead of an outage for as long as that cut lasts, the client sends the call to a
follower with ``nimbus-forward: 1`` and the follower relays it, request id and all, so a
retry still lands exactly once.

The caller's own ``authorization`` is relayed, never the follower's: the leader checks
the user's token itself. A forwarded call carries ``nimbus-forwarded-by`` and is never
forwarded again, so two replicas that each believe the other leads cannot loop a call.

A relay holds one of the follower's gRPC threads while it waits on the leader. So at most
``FORWARD_SLOTS`` relays run at once (more are turned away ``UNAVAILABLE`` at once, which
a client retries), and a relay ends when its client gives up: a frozen leader must not
take the threads that answer who leads (``tests/test_relay_capacity.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from cluster.api import rpc
from cluster.factory import channel_options
from cluster.security.client import ClientSecurity
from cluster.security.tokens import METADATA_KEY as AUTHORIZATION
from nimbus.call_metadata import FORWARD_METADATA_KEY, FORWARDED_BY_METADATA_KEY

T = TypeVar("T")

#: A forwarded call's deadline when the client set none.
DEFAULT_TIMEOUT_S = 30.0

#: Relays at once, of the server's 16 threads (``cluster.factory.make_grpc_server``): the
#: rest stay free for discovery, health and the leader's own calls.
FORWARD_SLOTS = 8

#: ``(stub, timeout, metadata) -> future``: one call of the leader's stub, not waited on.
Call = Callable[[rpc.NimbusStub, float, tuple[tuple[str, str], ...]], "grpc.Future[T]"]


def wants_forwarding(context: grpc.ServicerContext) -> bool:
    metadata = dict(context.invocation_metadata() or ())
    return metadata.get(FORWARD_METADATA_KEY) == "1" and FORWARDED_BY_METADATA_KEY not in metadata


class Forwarder:
    def __init__(self, replica_id: str, security: Callable[[], ClientSecurity]) -> None:
        self._id = replica_id
        self._security = security
        self._channels: dict[str, grpc.Channel] = {}
        self._guard = threading.Lock()
        self._slots = threading.BoundedSemaphore(FORWARD_SLOTS)

    def forward(self, leader: str, context: grpc.ServicerContext, call: Call[T]) -> T:
        """Send ``call`` to ``leader``; its status, details and trailers become ours."""
        incoming = dict(context.invocation_metadata() or ())
        metadata: list[tuple[str, str]] = [(FORWARDED_BY_METADATA_KEY, self._id)]
        if AUTHORIZATION in incoming:
            metadata.append((AUTHORIZATION, str(incoming[AUTHORIZATION])))
        remaining = context.time_remaining()
        timeout = DEFAULT_TIMEOUT_S if remaining is None else max(0.1, remaining)
        if not self._slots.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"{self._id} is relaying {FORWARD_SLOTS} calls to {leader} already "
                "(is the leader slow?); retry",
            )
        try:
            future = call(rpc.NimbusStub(self._channel(leader)), timeout, tuple(metadata))

            def cancel() -> None:
                future.cancel()

            if not context.add_callback(cancel):
                cancel()  # the client is gone already
            return future.result()
        except grpc.FutureCancelledError as e:
            context.abort(grpc.StatusCode.CANCELLED, f"the client cancelled the call: {e}")
            raise AssertionError("unreachable: abort raises") from e
        except grpc.RpcError as e:
            trailers: Any = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
            if trailers:
                context.set_trailing_metadata(tuple((m.key, m.value) for m in trailers))
            context.abort(e.code(), f"forwarded by {self._id} to {leader}: {e.details()}")
            raise AssertionError("unreachable: abort raises") from e
        finally:
            self._slots.release()

    def close(self) -> None:
        with self._guard:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    def _channel(self, address: str) -> grpc.Channel:
        with self._guard:
            channel = self._channels.get(address)
            if channel is None:
                # TLS as a peer, but no token of our own: the caller's is relayed instead.
                security = ClientSecurity(tls=self._security().tls)
                channel = self._channels[address] = security.channel(address, channel_options())
            return channel
