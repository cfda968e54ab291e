"""``leader.peer_link`` on real sockets: a peer whose kernel closes the connection and then
refuses reconnects is heard dead at once; a listener that merely stops answering, one that
closes and accepts again, or a proxy that accepts and closes at once, is not "dead"."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from leader.peer_link import PeerLink
from tests.waiting import wait_until


class Listener:
    """A TCP listener on loopback that keeps what it accepts, or (``keep=False``, a proxy
    in front of a live process) closes each connection at once."""

    def __init__(self, *, keep: bool = True) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self.accepts = 0
        self._keep = keep
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepts += 1
            if not self._keep:
                conn.close()
                continue
            conn.sendall(b"hello")  # a server that speaks first (gRPC's SETTINGS)
            self.accepted.append(conn)

    def close(self) -> None:
        """Nothing listens any more (a blocked accept() is woken: a close alone leaves the
        socket listening while the accepting thread holds it), then every connection."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in list(self.accepted):
            conn.close()


@pytest.fixture
def link() -> Iterator[tuple[PeerLink, threading.Event]]:
    changed = threading.Event()
    peer = PeerLink(changed.set)
    peer.start()
    yield peer, changed
    peer.stop()


def test_a_peer_that_goes_away_is_heard_dead(link: tuple[PeerLink, threading.Event]) -> None:
    peer, changed = link
    server = Listener()
    peer.follow(server.address)
    wait_until(lambda: server.accepted, timeout=5, message="the link connected")
    assert not peer.dead(server.address)
    server.close()  # the process's sockets closed, nothing listens any more
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(server.address.rsplit(":", 1)[1])), 1)
    assert changed.wait(5), "the close was reported"
    assert peer.dead(server.address)
    assert not peer.dead("127.0.0.1:1"), "only the followed address"


def test_a_closed_connection_reopened_is_not_closed(link: tuple[PeerLink, threading.Event]) -> None:
    peer, _ = link
    server = Listener()
    peer.follow(server.address)
    wait_until(lambda: server.accepted, timeout=5, message="the link connected")
    server.accepted[0].close()  # an idle connection dropped by a live server
    wait_until(lambda: len(server.accepted) >= 2, timeout=5, message="the link reconnected")
    assert not peer.dead(server.address)
    server.close()


def test_never_connected_is_no_evidence(link: tuple[PeerLink, threading.Event]) -> None:
    peer, changed = link
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
    peer.follow(address)  # nothing listens: connects are refused from the start
    assert not changed.wait(0.5)
    assert not peer.dead(address)


def test_following_another_address_forgets_the_evidence(
    link: tuple[PeerLink, threading.Event],
) -> None:
    peer, changed = link
    server = Listener()
    peer.follow(server.address)
    wait_until(lambda: server.accepted, timeout=5, message="the link connected")
    server.close()
    assert changed.wait(5)
    other = Listener()
    peer.follow(other.address)
    assert not peer.dead(server.address) and not peer.dead(other.address)
    wait_until(lambda: other.accepted, timeout=5, message="the link follows the new address")
    other.close()


def test_a_proxy_that_accepts_and_closes_is_never_dead_and_not_spun_on() -> None:
    """Each close is followed by a reconnect that succeeds: no evidence. And the link
    waits its retry interval between them, rather than reconnecting in a tight loop."""
    changes = threading.Event()
    retry = 0.1
    peer = PeerLink(changes.set, retry=retry)
    proxy = Listener(keep=False)
    peer.start()
    try:
        started = time.monotonic()
        peer.follow(proxy.address)
        wait_until(lambda: proxy.accepts >= 6, timeout=10, message="reconnects")
        elapsed = time.monotonic() - started
        assert elapsed >= 5 * retry * 0.9, f"6 connects in {elapsed:.3f}s: the link spins"
        assert not peer.dead(proxy.address)
        assert not changes.is_set()
    finally:
        peer.stop()
        proxy.sock.close()


def test_reconnects_must_fail_for_dead_after_before_the_peer_is_dead() -> None:
    changed = threading.Event()
    clock = [0.0]
    peer = PeerLink(changed.set, dead_after=5.0, clock=lambda: clock[0])
    peer.start()
    try:
        server = Listener()
        peer.follow(server.address)
        wait_until(lambda: server.accepted, timeout=5, message="the link connected")
        server.close()
        wait_until(lambda: peer._closed_at is not None, timeout=5, message="the close heard")
        assert not changed.wait(0.3), "refused for less than dead_after: not dead yet"
        assert not peer.dead(server.address)
        clock[0] = 5.0
        assert changed.wait(5), "refused past dead_after: dead"
        assert peer.dead(server.address)
    finally:
        peer.stop()
