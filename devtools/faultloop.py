"""The fault proxy's event loop: one thread, one selector, every connection of one proxy.

``devtools.faultproxy.FaultProxy`` is the control surface; it writes the wanted faults into
a ``ProxyState`` under its lock and wakes this loop, which applies them to every link.

Invariant: only the loop's thread touches sockets after start; it reads the modes under
the lock on each read, so bytes sent after a mode call returned are subject to it.
Blackholed bytes are discarded, never buffered for later.
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
from dataclasses import dataclass, field
from typing import Final, cast

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
class Mode:
    """What one direction does with the bytes it reads now."""

    blackhole: bool = False
    delay: float = 0.0


@dataclass
class Flow:
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
class Link:
    """One client connection and its connection to the target."""

    client: socket.socket
    server: socket.socket
    up: Flow
    down: Flow
    connected: bool = False


@dataclass
class ProxyState:
    """What the control surface asks and the loop reports; every field under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    modes: dict[str, Mode] = field(default_factory=lambda: fresh_modes())
    refuse_new: bool = False
    reset_requests: list[threading.Event] = field(default_factory=list)
    stopping: bool = False
    links: list[Link] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=lambda: {"upstream": 0, "downstream": 0})
    accepted: int = 0


def fresh_modes() -> dict[str, Mode]:
    """Pass-through both ways."""
    return {"upstream": Mode(), "downstream": Mode()}


class ForwardingLoop:
    """Forwards between the listener's clients and ``target``, applying ``state``'s faults."""

    def __init__(
        self,
        state: ProxyState,
        listener: socket.socket,
        wake_r: socket.socket,
        target: tuple[str, int],
    ) -> None:
        self._state = state
        self._listener = listener
        self._wake_r = wake_r
        self._target = target
        self._sel = selectors.DefaultSelector()
        self._registered: dict[socket.socket, int] = {}
        self._sel.register(self._wake_r, selectors.EVENT_READ)

    def run(self) -> None:
        """The proxy thread: until ``state.stopping``; closes every socket it used."""
        try:
            while True:
                with self._state.lock:
                    stopping = self._state.stopping
                    resets, self._state.reset_requests = self._state.reset_requests, []
                    modes = dict(self._state.modes)
                    refuse = self._state.refuse_new
                if stopping:
                    return
                if resets:
                    for link in list(self._state.links):
                        self._close_link(link, rst=True)
                    for event in resets:
                        event.set()
                self._release_due(time.monotonic())
                self._update_interest(modes, refuse)
                for key, mask in self._sel.select(self._select_timeout()):
                    self._dispatch(cast(socket.socket, key.fileobj), mask)
        finally:
            for link in list(self._state.links):
                self._close_link(link, rst=False)
            self._sel.close()
            self._listener.close()
            with self._state.lock:
                for event in self._state.reset_requests:
                    event.set()

    def _select_timeout(self) -> float | None:
        dues = [
            f.delayed[0][0] for link in self._state.links for f in (link.up, link.down) if f.delayed
        ]
        if not dues:
            return None
        return max(0.0, min(dues) - time.monotonic())

    def _release_due(self, now: float) -> None:
        for link in self._state.links:
            for flow in (link.up, link.down):
                while flow.delayed and flow.delayed[0][0] <= now:
                    _, data = flow.delayed.popleft()
                    flow.delayed_bytes -= len(data)
                    flow.buf += data

    def _update_interest(self, modes: dict[str, Mode], refuse: bool) -> None:
        holding = modes["upstream"].blackhole or modes["downstream"].blackhole
        wanted: dict[socket.socket, int] = {self._wake_r: selectors.EVENT_READ}
        if refuse or not holding:
            wanted[self._listener] = selectors.EVENT_READ
        for link in list(self._state.links):
            for name, flow in (("upstream", link.up), ("downstream", link.down)):
                if modes[name].blackhole:
                    dropped = flow.drop_in_flight()  # in flight when the cut came: lost
                    if dropped:
                        with self._state.lock:
                            self._state.dropped[name] += dropped
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
                    with self._state.lock:
                        cut = self._state.modes[name].blackhole
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

    def _read(self, flow: Flow, name: str) -> None:
        data = flow.src.recv(_CHUNK)
        # The mode as of now, not of the loop's last turn: bytes sent after a mode call
        # returned must be subject to it.
        with self._state.lock:
            mode = self._state.modes[name]
        if not data:
            flow.src_eof = True
        elif mode.blackhole:
            with self._state.lock:
                self._state.dropped[name] += len(data)
        elif mode.delay > 0:
            due = time.monotonic() + mode.delay
            if flow.delayed:
                due = max(due, flow.delayed[-1][0])
            flow.delayed.append((due, data))
            flow.delayed_bytes += len(data)
        else:
            flow.buf += data

    def _accept(self) -> None:
        while True:
            with self._state.lock:
                refuse = self._state.refuse_new
                holding = any(m.blackhole for m in self._state.modes.values())
            if holding and not refuse:
                return  # leave it in the backlog; the next turn stops listening
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            with self._state.lock:
                self._state.accepted += 1
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
            link = Link(client, server, Flow(client, server), Flow(server, client))
            link.connected = code == 0
            with self._state.lock:
                self._state.links.append(link)

    def _link_of(self, sock: socket.socket) -> Link | None:
        for link in self._state.links:
            if sock is link.client or sock is link.server:
                return link
        return None

    def _close_link(self, link: Link, rst: bool) -> None:
        for sock in (link.client, link.server):
            if sock in self._registered:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(sock)
                del self._registered[sock]
            if rst:
                _abort(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.close()
        with self._state.lock:
            if link in self._state.links:
                self._state.links.remove(link)
