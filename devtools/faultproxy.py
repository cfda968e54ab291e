"""A TCP proxy that injects network faults on one link, for tests that need no root.

Put one proxy in front of one server (a ZooKeeper node, a gRPC replica) and point one
client at it; the test can then cut that process off without iptables: ``blackhole``
(silence, no reset), ``reset`` (RST every connection), ``delay`` and ``refuse_new``,
per direction: ``upstream`` is client -> server, ``downstream`` is server -> client.

Blackholed bytes on an established connection are **discarded**, not buffered: like a
partition that eats packets, a request sent into the hole never reaches the server, even
after the heal (the case fencing tests need: a write that is never applied late). The
connection itself stays open and an EOF is held until the heal, so the peer sees silence.
New connections made while any direction is blackholed are left in the listen backlog and
accepted after the heal, as a real client's SYN retransmission would get through then.

Invariant: one thread (``devtools.faultloop``) runs every connection through a selector:
no busy loop, and :meth:`FaultProxy.stop` joins it, which closes every socket. This module
is the control surface: a mode call takes effect at once, for existing connections and new
ones alike.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Literal

from devtools.faultloop import ForwardingLoop, Mode, ProxyState, fresh_modes
from devtools.lifetime import Started

Direction = Literal["upstream", "downstream", "both"]


class FaultProxy(Started):
    """Forwards ``listen_host:listen_port`` to ``target_host:target_port`` with faults.

    All mode methods are thread-safe and take effect at once, for existing connections
    and new ones alike.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self._target = (target_host, target_port)
        self._listen_addr = (listen_host, listen_port)
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._state = ProxyState()
        self._wake_r, self._wake_w = socket.socketpair()  # remade by start()

    # ---- lifecycle

    def start(self) -> FaultProxy:
        """Bind and start forwarding; returns self."""
        if self._thread is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(self._listen_addr)
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        with self._state.lock:
            self._state.stopping = False
        loop = ForwardingLoop(self._state, listener, self._wake_r, self._target)
        self._thread = threading.Thread(
            target=loop.run, name=f"faultproxy-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close every connection and the listener, and join the thread; idempotent."""
        thread = self._thread
        if thread is None:
            return
        with self._state.lock:
            self._state.stopping = True
        self._wake()
        thread.join()
        self._thread = None
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    # ---- addresses and counters

    @property
    def host(self) -> str:
        if self._listener is None:
            raise RuntimeError("the proxy is not started")
        return str(self._listener.getsockname()[0])

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("the proxy is not started")
        return int(self._listener.getsockname()[1])

    @property
    def address(self) -> str:
        """``host:port`` to give the client instead of the target's."""
        return f"{self.host}:{self.port}"

    @property
    def target(self) -> tuple[str, int]:
        return self._target

    @property
    def connection_count(self) -> int:
        """Connections currently open through the proxy."""
        with self._state.lock:
            return len(self._state.links)

    @property
    def accepted_count(self) -> int:
        """Connections accepted since start (refused ones included)."""
        with self._state.lock:
            return self._state.accepted

    def dropped_bytes(self, direction: Literal["upstream", "downstream"]) -> int:
        """Bytes a blackhole has discarded in ``direction`` since start."""
        with self._state.lock:
            return self._state.dropped[direction]

    # ---- modes

    def pass_through(self) -> None:
        """Forward everything at once, both ways, and accept new connections again."""
        with self._state.lock:
            self._state.modes = fresh_modes()
            self._state.refuse_new = False
        self._wake()

    def blackhole(self, direction: Direction = "both") -> None:
        """Discard bytes in ``direction`` but keep sockets open: the peer sees silence."""
        with self._state.lock:
            for d in self._directions(direction):
                self._state.modes[d] = Mode(blackhole=True)
        self._wake()

    def delay(self, seconds: float, direction: Direction = "both") -> None:
        """Hold each chunk ``seconds`` before forwarding it in ``direction`` (order kept)."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        with self._state.lock:
            for d in self._directions(direction):
                self._state.modes[d] = Mode(delay=seconds)
        self._wake()

    def refuse_new(self, refuse: bool = True) -> None:
        """Reset new connections at once (accepted, then RST) while ``refuse`` holds.

        Accept-then-RST keeps the port ours; to the client it is a failed connection.
        """
        with self._state.lock:
            self._state.refuse_new = refuse
        self._wake()

    def reset(self, refuse_new: bool = False, timeout: float = 5.0) -> None:
        """RST every current connection (both sides); return once they are closed.

        With ``refuse_new`` new connections are reset too, until :meth:`pass_through` or
        ``refuse_new(False)``.
        """
        done = threading.Event()
        with self._state.lock:
            if refuse_new:
                self._state.refuse_new = True
            if self._thread is None:
                return
            self._state.reset_requests.append(done)
        self._wake()
        if not done.wait(timeout):
            raise TimeoutError("the proxy did not reset its connections in time")

    @staticmethod
    def _directions(direction: Direction) -> tuple[str, ...]:
        if direction == "both":
            return ("upstream", "downstream")
        if direction in ("upstream", "downstream"):
            return (direction,)
        raise ValueError(f"direction must be upstream, downstream or both, not {direction!r}")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")


class ProxiedEnsemble(Started):
    """One :class:`FaultProxy` per ZooKeeper node, and a connect string through them all."""

    def __init__(self, connect_string: str) -> None:
        targets: list[tuple[str, int]] = []
        for hostport in connect_string.split("/", 1)[0].split(","):
            host, _, port = hostport.strip().rpartition(":")
            targets.append((host, int(port)))
        self.proxies: list[FaultProxy] = [FaultProxy(h, p) for h, p in targets]

    def start(self) -> ProxiedEnsemble:
        for proxy in self.proxies:
            proxy.start()
        return self

    def stop(self) -> None:
        for proxy in self.proxies:
            proxy.stop()

    def __getitem__(self, i: int) -> FaultProxy:
        return self.proxies[i]

    def __iter__(self) -> Iterator[FaultProxy]:
        return iter(self.proxies)

    def __len__(self) -> int:
        return len(self.proxies)

    @property
    def connect_string(self) -> str:
        """``host:port,...`` of the proxies, in the order of the nodes."""
        return ",".join(p.address for p in self.proxies)

    def _each(self, indexes: Sequence[int] | None) -> list[FaultProxy]:
        return self.proxies if indexes is None else [self.proxies[i] for i in indexes]

    def pass_through(self, indexes: Sequence[int] | None = None) -> None:
        for p in self._each(indexes):
            p.pass_through()

    def blackhole(
        self, direction: Direction = "both", indexes: Sequence[int] | None = None
    ) -> None:
        for p in self._each(indexes):
            p.blackhole(direction)

    def delay(
        self, seconds: float, direction: Direction = "both", indexes: Sequence[int] | None = None
    ) -> None:
        for p in self._each(indexes):
            p.delay(seconds, direction)

    def reset(self, refuse_new: bool = False, indexes: Sequence[int] | None = None) -> None:
        for p in self._each(indexes):
            p.reset(refuse_new)
