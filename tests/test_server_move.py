"""``cluster.server_move`` on a real 3-server ensemble: a replica that leaves a server it
accuses keeps its session (and so its ephemeral lock node), lands on another server, is
refused a second move within its interval, and gets the whole host list back later."""

from __future__ import annotations

import logging
import uuid

from kazoo.client import KazooClient, KazooState

from cluster.quorum_probe import probe_for, reaches_quorum, servers_reaching_quorum
from cluster.server_move import Move, ServerMover, current_server
from devtools.zkserver import ZooKeeperCluster
from tests.waiting import wait_until


def _client(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    return client


def test_a_move_keeps_the_session_and_its_ephemeral_node(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    client = _client(healthy_ensemble.connect_string)
    moved: list[Move] = []
    mover = ServerMover(client, min_interval=60.0, quarantine=1.0, on_move=moved.append)
    try:
        node = client.create("/move-test-", b"x", ephemeral=True, sequence=True)
        session = client.client_id[0]
        before = current_server(client)
        assert before is not None
        done = mover.move("planted: this server is accused")
        assert done is not None and done.suspect == before and moved == [done]
        assert before not in done.others and len(done.others) == 2
        wait_until(
            lambda: (
                client.state == KazooState.CONNECTED
                and current_server(client) not in (None, before)
            ),
            timeout=30,
            message="reconnected to another server",
        )
        assert client.client_id[0] == session, "the session was kept"
        stat = client.exists(node)
        assert stat is not None and stat.ephemeralOwner == session, "its ephemeral node too"
        assert mover.move("a second accusation at once") is None, "one move per interval"
        wait_until(lambda: len(client.hosts) == 3, timeout=10, message="the full list is back")
    finally:
        mover.stop()
        client.stop()
        client.close()


def test_with_one_server_there_is_nowhere_to_move(zk_server: ZooKeeperCluster) -> None:
    client = _client(zk_server.connect_string)
    try:
        session = client.client_id[0]
        assert ServerMover(client, min_interval=0.0, quarantine=1.0).move("planted") is None
        assert client.state == KazooState.CONNECTED and client.client_id[0] == session
    finally:
        client.stop()
        client.close()


def test_not_connected_is_no_move(healthy_ensemble: ZooKeeperCluster) -> None:
    client = KazooClient(hosts=healthy_ensemble.connect_string)  # never started
    assert current_server(client) is None
    assert ServerMover(client, min_interval=0.0, quarantine=1.0).move("planted") is None


def _index_of(ensemble: ZooKeeperCluster, server: str) -> int:
    return ensemble.client_ports.index(int(server.rsplit(":", 1)[1]))


def test_the_probe_tells_a_server_that_reaches_its_quorum_from_one_that_stalls(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    leader = healthy_ensemble.leader_index()
    follower, frozen = [i for i in range(3) if i != leader]  # a frozen leader stalls all
    client = _client(healthy_ensemble.node_connect_string(follower))
    try:
        ports = healthy_ensemble.client_ports
        assert reaches_quorum(client, "127.0.0.1", ports[follower], timeout=5.0)
        healthy_ensemble.pause(frozen)
        assert not reaches_quorum(client, "127.0.0.1", ports[frozen], timeout=0.5)
        servers = [("127.0.0.1", ports[follower]), ("127.0.0.1", ports[frozen])]
        assert servers_reaching_quorum(client, servers, timeout=2.0) == [servers[0]]
    finally:
        client.stop()
        client.close()


def test_a_move_goes_only_to_a_server_that_opens_a_session(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    """Of the two other servers one is frozen: the move goes to the one that answers the
    probe. With both frozen (the ensemble stalls for us) there is no move at all, where an
    unprobed move would have gone to a frozen server and lost the session."""
    client = _client(healthy_ensemble.connect_string)
    mover = ServerMover(client, min_interval=0.0, quarantine=60.0, probe=probe_for(client, 4.0))
    try:
        before = current_server(client)
        assert before is not None
        mine = _index_of(healthy_ensemble, before)
        # Freeze a follower: a frozen ZooKeeper leader would stall every server.
        leader = healthy_ensemble.leader_index()
        frozen, good = sorted((i for i in range(3) if i != mine), key=lambda i: i == leader)
        healthy_ensemble.pause(frozen)
        done = mover.move("planted: this server is accused")
        assert done is not None
        assert done.others == (f"127.0.0.1:{healthy_ensemble.client_ports[good]}",)
        wait_until(
            lambda: current_server(client) == done.others[0],
            timeout=30,
            message="reconnected to the server that answered",
        )
        healthy_ensemble.pause(mine)  # now both others of `good` are frozen
        assert mover.move("planted again, the ensemble stalls") is None
    finally:
        mover.stop()
        client.stop()
        client.close()


class _Attempts(logging.Handler):
    """The ports a kazoo client tries, in order, and those it connected to, from its log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.ports: list[int] = []
        self.connected: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Zookeeper connection established") and self.ports:
            self.connected.append(self.ports[-1])
        if str(record.msg).startswith("Connecting to") and isinstance(record.args, tuple):
            port = record.args[2]  # kazoo: "Connecting to %s(%s):%s", host, address, port
            if isinstance(port, int):
                self.ports.append(port)


def attempts_logger(name: str) -> tuple[logging.Logger, _Attempts]:
    """A logger for ``KazooClient(logger=...)`` that records where the client connects."""
    logger = logging.getLogger(f"tests.kazoo.{name}.{uuid.uuid4().hex[:8]}")
    logger.setLevel(logging.INFO)
    attempts = _Attempts()
    logger.addHandler(attempts)
    return logger, attempts


def test_the_first_attempt_after_a_move_goes_to_the_server_the_probe_chose(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    """Hosts in a fixed order (f1, f2, leader), connected to f1, f2 frozen: the probe
    chooses the leader. kazoo's pass over the old list would try f2 next, for T/3, and the
    session could expire there; the move's first attempt must be the chosen server."""
    leader = healthy_ensemble.leader_index()
    assert leader is not None
    first, frozen = [i for i in range(3) if i != leader]
    ports = healthy_ensemble.client_ports
    logger, attempts = attempts_logger("move")
    client = KazooClient(
        hosts=",".join(f"127.0.0.1:{ports[i]}" for i in (first, frozen, leader)),
        timeout=10.0,
        randomize_hosts=False,
        logger=logger,
    )
    mover = ServerMover(client, min_interval=0.0, quarantine=60.0, probe=probe_for(client, 10.0))
    client.start(timeout=30)
    try:
        assert current_server(client) == f"127.0.0.1:{ports[first]}"
        session = client.client_id[0]
        healthy_ensemble.pause(frozen)
        before = len(attempts.ports)
        done = mover.move("planted: this server is accused")
        assert done is not None and done.others == (f"127.0.0.1:{ports[leader]}",)
        wait_until(
            lambda: (
                client.state == KazooState.CONNECTED and current_server(client) == done.others[0]
            ),
            timeout=30,
            message="reconnected to the server the probe chose",
        )
        assert attempts.ports[before:] == [ports[leader]], "its first attempt, and only one"
        assert client.client_id[0] == session
    finally:
        mover.stop()
        client.stop()
        client.close()
