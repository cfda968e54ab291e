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

One thread runs everything through a selector: no busy loop, and :meth:`FaultProxy.stop`
joins it and closes every socket.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Literal, cast

Direction = Literal["upstream", "downstream", "both"]

_CHUNK: Final = 65536
_HIGH_WATER: Final = 1 << 20  # stop reading a side while this much waits to be sent
_LINGER_RST: Final = struct.pack("ii", 1, 0)


def _abort(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the peer gets ECONNRESET, not an orderly EOF."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class _Mode:
    blackhole: bool = False
    delay: float = 0.0


@dataclass
class _Flow:
    """One direction of one connection: bytes read from ``src`` go to ``dst``."""

    src: socket.socket
    dst: socket.socket
    buf: bytearray = field(default_factory=bytearray)
    delayed: deque[tuple[float, bytes]] = field(default_factory=deque)
    delayed_bytes: int = 0
    src_eof: bool = False
    dst_shut: bool = False

    def queued(self) -> int:
        return len(self.buf) + self.delayed_bytes

    def drop_in_flight(self) -> int:
        dropped = self.queued()
        self.buf.clear()
        self.delayed.clear()
        self.delayed_bytes = 0
        return dropped


@dataclass
class _Link:
    client: socket.socket
    server: socket.socket
    up: _Flow
    down: _Flow
    connected: bool = False


class FaultProxy:
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
        self._lock = threading.Lock()
        self._modes = {"upstream": _Mode(), "downstream": _Mode()}
        self._refuse_new = False
        self._reset_requests: list[threading.Event] = []
        self._stopping = False
        self._links: list[_Link] = []
        self._dropped = {"upstream": 0, "downstream": 0}
        self._accepted = 0
        self._wake_r, self._wake_w = socket.socketpair()  # remade by start()
        self._sel: selectors.DefaultSelector | None = None
        self._registered: dict[socket.socket, int] = {}

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
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._registered = {}
        self._stopping = False
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(
            target=self._run, name=f"faultproxy-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close every connection and the listener, and join the thread; idempotent."""
        thread = self._thread
        if thread is None:
            return
        with self._lock:
            self._stopping = True
        self._wake()
        thread.join()
        self._thread = None
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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
        with self._lock:
            return len(self._links)

    @property
    def accepted_count(self) -> int:
        """Connections accepted since start (refused ones included)."""
        with self._lock:
            return self._accepted

    def dropped_bytes(self, direction: Literal["upstream", "downstream"]) -> int:
        """Bytes a blackhole has discarded in ``direction`` since start."""
        with self._lock:
            return self._dropped[direction]

    # ---- modes

    def pass_through(self) -> None:
        """Forward everything at once, both ways, and accept new connections again."""
        with self._lock:
            self._modes = {"upstream": _Mode(), "downstream": _Mode()}
            self._refuse_new = False
        self._wake()

    def blackhole(self, direction: Direction = "both") -> None:
        """Discard bytes in ``direction`` but keep sockets open: the peer sees silence."""
        with self._lock:
            for d in self._directions(direction):
                self._modes[d] = _Mode(blackhole=True)
        self._wake()

    def delay(self, seconds: float, direction: Direction = "both") -> None:
        """Hold each chunk ``seconds`` before forwarding it in ``direction`` (order kept)."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        with self._lock:
            for d in self._directions(direction):
                self._modes[d] = _Mode(delay=seconds)
        self._wake()

    def refuse_new(self, refuse: bool = True) -> None:
        """Reset new connections at once (accepted, then RST) while ``refuse`` holds.

        Accept-then-RST keeps the port ours; to the client it is a failed connection.
        """
        with self._lock:
            self._refuse_new = refuse
        self._wake()

    def reset(self, refuse_new: bool = False, timeout: float = 5.0) -> None:
        """RST every current connection (both sides); return once they are closed.

        With ``refuse_new`` new connections are reset too, until :meth:`pass_through` or
        ``refuse_new(False)``.
        """
        done = threading.Event()
        with self._lock:
            if refuse_new:
                self._refuse_new = True
            if self._thread is None:
                return
            self._reset_requests.append(done)
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

    # ---- the event loop (proxy thread only below this line)

    def _run(self) -> None:
        assert self._sel is not None and self._listener is not None
        try:
            while True:
                with self._lock:
                    stopping = self._stopping
                    resets, self._reset_requests = self._reset_requests, []
                    modes = dict(self._modes)
                    refuse = self._refuse_new
                if stopping:
                    return
                if resets:
                    for link in list(self._links):
                        self._close_link(link, rst=True)
                    for event in resets:
                        event.set()
                self._release_due(time.monotonic())
                self._update_interest(modes, refuse)
                for key, mask in self._sel.select(self._select_timeout()):
                    self._dispatch(cast(socket.socket, key.fileobj), mask)
        finally:
            for link in list(self._links):
                self._close_link(link, rst=False)
            self._sel.close()
            self._listener.close()
            with self._lock:
                for event in self._reset_requests:
                    event.set()

    def _select_timeout(self) -> float | None:
        dues = [f.delayed[0][0] for link in self._links for f in (link.up, link.down) if f.delayed]
        if not dues:
            return None
        return max(0.0, min(dues) - time.monotonic())

    def _release_due(self, now: float) -> None:
        for link in self._links:
            for flow in (link.up, link.down):
                while flow.delayed and flow.delayed[0][0] <= now:
                    _, data = flow.delayed.popleft()
                    flow.delayed_bytes -= len(data)
                    flow.buf += data

    def _update_interest(self, modes: dict[str, _Mode], refuse: bool) -> None:
        assert self._listener is not None
        holding = modes["upstream"].blackhole or modes["downstream"].blackhole
        wanted: dict[socket.socket, int] = {self._wake_r: selectors.EVENT_READ}
        if refuse or not holding:
            wanted[self._listener] = selectors.EVENT_READ
        for link in list(self._links):
            for name, flow in (("upstream", link.up), ("downstream", link.down)):
                if modes[name].blackhole:
                    dropped = flow.drop_in_flight()  # in flight when the cut came: lost
                    if dropped:
                        with self._lock:
                            self._dropped[name] += dropped
                elif flow.src_eof and not flow.dst_shut and not flow.queued():
                    with contextlib.suppress(OSError):
                        flow.dst.shutdown(socket.SHUT_WR)
                    flow.dst_shut = True
            if link.up.dst_shut and link.down.dst_shut:
                self._close_link(link, rst=False)
                continue
            if not link.connected:
                wanted[link.server] = selectors.EVENT_WRITE
                continue
            for flow in (link.up, link.down):
                if not flow.src_eof and flow.queued() < _HIGH_WATER:
                    wanted[flow.src] = wanted.get(flow.src, 0) | selectors.EVENT_READ
                if flow.buf:
                    wanted[flow.dst] = wanted.get(flow.dst, 0) | selectors.EVENT_WRITE
        assert self._sel is not None
        for sock in list(self._registered):
            if sock not in wanted:
                self._sel.unregister(sock)
                del self._registered[sock]
        for sock, events in wanted.items():
            if sock not in self._registered and sock is not self._wake_r:
                self._sel.register(sock, events)
                self._registered[sock] = events
            elif sock is not self._wake_r and self._registered[sock] != events:
                self._sel.modify(sock, events)
                self._registered[sock] = events

    def _dispatch(self, sock: socket.socket, mask: int) -> None:
        if sock is self._wake_r:
            with contextlib.suppress(OSError):
                while self._wake_r.recv(4096):
                    pass
            return
        if sock is self._listener:
            self._accept()
            return
        link = self._link_of(sock)
        if link is None:
            return
        if not link.connected:
            err = link.server.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._close_link(link, rst=True)  # target refused: the client sees a reset
            else:
                link.connected = True
            return
        try:
            if mask & selectors.EVENT_WRITE:
                for flow, name in ((link.up, "upstream"), (link.down, "downstream")):
                    with self._lock:
                        cut = self._modes[name].blackhole
                    if flow.dst is sock and flow.buf and not cut:
                        sent = sock.send(flow.buf)
                        del flow.buf[:sent]
            if mask & selectors.EVENT_READ:
                if sock is link.client:
                    self._read(link.up, "upstream")
                else:
                    self._read(link.down, "downstream")
        except BlockingIOError:
            pass
        except OSError:
            self._close_link(link, rst=True)  # one side failed: pass the reset on

    def _read(self, flow: _Flow, name: str) -> None:
        data = flow.src.recv(_CHUNK)
        # The mode as of now, not of the loop's last turn: bytes sent after a mode call
        # returned must be subject to it.
        with self._lock:
            mode = self._modes[name]
        if not data:
            flow.src_eof = True
        elif mode.blackhole:
            with self._lock:
                self._dropped[name] += len(data)
        elif mode.delay > 0:
            due = time.monotonic() + mode.delay
            if flow.delayed:
                due = max(due, flow.delayed[-1][0])
            flow.delayed.append((due, data))
            flow.delayed_bytes += len(data)
        else:
            flow.buf += data

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            with self._lock:
                refuse = self._refuse_new
                holding = any(m.blackhole for m in self._modes.values())
            if holding and not refuse:
                return  # leave it in the backlog; the next turn stops listening
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            with self._lock:
                self._accepted += 1
            if refuse:
                _abort(client)
                continue
            client.setblocking(False)
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setblocking(False)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = server.connect_ex(self._target)
            if code not in (0, errno.EINPROGRESS, errno.EAGAIN):
                _abort(client)
                server.close()
                continue
            link = _Link(client, server, _Flow(client, server), _Flow(server, client))
            link.connected = code == 0
            with self._lock:
                self._links.append(link)

    def _link_of(self, sock: socket.socket) -> _Link | None:
        for link in self._links:
            if sock is link.client or sock is link.server:
                return link
        return None

    def _close_link(self, link: _Link, rst: bool) -> None:
        for sock in (link.client, link.server):
            if sock in self._registered:
                assert self._sel is not None
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(sock)
                del self._registered[sock]
            if rst:
                _abort(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.close()
        with self._lock:
            if link in self._links:
                self._links.remove(link)


class ProxiedEnsemble:
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

    def __enter__(self) -> ProxiedEnsemble:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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
