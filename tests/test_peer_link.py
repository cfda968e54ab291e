"""``leader.peer_link`` on real sockets: a peer whose kernel closes the connection is heard
at once; a listener that merely stops answering, or one that closes and accepts again, is
not "closed"."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from leader.peer_link import PeerLink
from tests.waiting import wait_until


class Listener:
    """A TCP listener on loopback that keeps what it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
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


def test_a_peer_that_goes_away_is_heard_closed(link: tuple[PeerLink, threading.Event]) -> None:
    peer, changed = link
    server = Listener()
    peer.follow(server.address)
    wait_until(lambda: server.accepted, timeout=5, message="the link connected")
    assert not peer.closed(server.address)
    server.close()  # the process's sockets closed, nothing listens any more
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(server.address.rsplit(":", 1)[1])), 1)
    assert changed.wait(5), "the close was reported"
    assert peer.closed(server.address)
    assert not peer.closed("127.0.0.1:1"), "only the followed address"


def test_a_closed_connection_reopened_is_not_closed(link: tuple[PeerLink, threading.Event]) -> None:
    peer, _ = link
    server = Listener()
    peer.follow(server.address)
    wait_until(lambda: server.accepted, timeout=5, message="the link connected")
    server.accepted[0].close()  # an idle connection dropped by a live server
    wait_until(lambda: len(server.accepted) >= 2, timeout=5, message="the link reconnected")
    assert not peer.closed(server.address)
    server.close()


def test_never_connected_is_no_evidence(link: tuple[PeerLink, threading.Event]) -> None:
    peer, changed = link
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
    peer.follow(address)  # nothing listens: connects are refused from the start
    assert not changed.wait(0.5)
    assert not peer.closed(address)


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
    assert not peer.closed(server.address) and not peer.closed(other.address)
    wait_until(lambda: other.accepted, timeout=5, message="the link follows the new address")
    other.close()
