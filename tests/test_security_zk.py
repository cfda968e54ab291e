"""ZooKeeper digest auth and ACLs, on a real ZooKeeper with a real replica and supervisor."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl

from cluster.api import pb, records
from cluster.errors import ConfigError
from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from cluster.security.zkauth import FILE_ENV, SECRET_ENV, ZkAuth, load_zk_auth
from nimbus.client import NimbusClient
from nimbus.server.security.credentials import read_credentials
from tests.cluster import REPO, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, package, submit, sync_flags
from tests.security_helpers import write_secret
from tests.waiting import wait_until

ROOT = "/storm"
PATHS = Paths(ROOT)
SERVICE = ZkAuth("nimbus", "s3cret-for-tests")
PAYLOAD = b"stranger was here"


def connect(hosts: str, auth: ZkAuth | None = None) -> KazooClient:
    client = make_kazoo_client(hosts, session_timeout=10.0, auth=auth)
    client.start(timeout=30)
    return client


@pytest.fixture
def clients(zk_hosts: str) -> Iterator[list[KazooClient]]:
    """Clients closed at the end; then the service's tree is removed with its identity.

    Requested before ``spawn``, so this runs after the replicas are gone: the chroot's
    own cleanup cannot delete nodes only the service may delete.
    """
    made: list[KazooClient] = []
    yield made
    for c in made:
        c.stop()
        c.close()
    service = connect(zk_hosts, SERVICE)

    def removed() -> bool:
        service.delete(ROOT, recursive=True)  # NotEmpty while a closing session's ephemerals linger
        return True

    try:
        if service.exists(ROOT):
            wait_until(removed, 15, message=f"removal of {ROOT}")
    finally:
        service.stop()
        service.close()


def walk(client: KazooClient, path: str) -> Iterator[str]:
    yield path
    for child in sorted(client.get_children(path)):
        yield from walk(client, f"{path}/{child}")


def start_supervisor(zk_hosts: str, tmp_path: Path, secret: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "nimbus.cli", "supervisor", "--zookeeper", zk_hosts,
        "--root", ROOT, "--id", "sup-1", "--host", "127.0.0.1", "--slots", "2",
        "--heartbeat-interval", "0.2", "--session-timeout", "2", "--no-workers",
        "--zk-auth-file", str(secret),
    ]  # fmt: skip
    with (tmp_path / "supervisor.log").open("ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)


def test_without_the_service_credentials_nothing_under_the_root_changes(
    clients: list[KazooClient], spawn: Spawn, zk_hosts: str, tmp_path: Path
) -> None:
    secret = write_secret(tmp_path / "zk-auth", f"{SERVICE.user}:{SERVICE.password}\n")
    auth_flags = ("--zk-auth-file", str(secret))
    replica = spawn(extra=sync_flags(replicas=1, min_replicas=1) + auth_flags)
    supervisor = start_supervisor(zk_hosts, tmp_path, secret)
    try:
        wait_for_agreed_leader([replica], timeout=30)
        path, _ = package(tmp_path, "wc")
        with NimbusClient([replica.address]) as nimbus:
            tid = submit(nimbus, path, "wc").topology_id
        service = connect(zk_hosts, SERVICE)
        clients.append(service)
        # The service works: the supervisor registered and heartbeats the slot the
        # leader assigned, and the topology got its credentials node.
        wait_until(lambda: service.exists(PATHS.assignment(tid)), 20, message="an assignment")
        wait_until(lambda: service.get_children(PATHS.workerbeats_of(tid)), 20, message="beats")
        wait_until(lambda: service.exists(Paths(ROOT).credential(tid)), 20, message="credentials")

        nodes = list(walk(service, ROOT))
        assert PATHS.supervisor("sup-1") in nodes and any("leader-lock/" in n for n in nodes)
        mine = make_acl("digest", SERVICE.acl[0].id.id, all=True)
        for node in nodes:
            acls, _ = service.get_acls(node)
            assert mine in acls, f"{node} lacks the service ACL: {acls}"
            assert all(a.id.scheme == "digest" for a in acls), f"{node} is open: {acls}"
        before = {n: service.get_acls(n)[1].aversion for n in nodes}

        stranger = connect(zk_hosts)
        impostor = connect(zk_hosts, ZkAuth(SERVICE.user, "not-the-password"))
        clients.extend([stranger, impostor])
        attempts = 0
        for client in (stranger, impostor):
            for node in nodes:
                calls: list[Callable[[], object]] = [
                    partial(client.create, f"{node}/stranger", PAYLOAD),
                    partial(client.set, node, PAYLOAD),
                    partial(client.set_acls, node, [make_acl("world", "anyone", all=True)]),
                    partial(client.get, node),
                ]
                if node != ROOT:  # the root's own parent is not the service's
                    calls.append(partial(client.delete, node))
                for call in calls:
                    with pytest.raises(NoAuthError):
                        call()
                    attempts += 1
            txn = client.transaction()
            txn.create(f"{PATHS.storms}/forged", PAYLOAD)
            results = txn.commit()
            assert isinstance(results[0], NoAuthError)
        assert attempts > 100

        after = list(walk(service, ROOT))
        assert set(nodes) <= set(after), "a node was deleted"
        assert not [n for n in after if "stranger" in n or "forged" in n]
        assert all(service.get(n)[0] != PAYLOAD for n in after)
        assert {n: service.get_acls(n)[1].aversion for n in nodes} == before

        # Still leading, still serving: a mutating call goes through.
        with NimbusClient([replica.address]) as nimbus:
            reply = nimbus.call_leader("DeactivateTopology", pb.TopologyNameRequest(name="wc"))
            assert reply.status == records.INACTIVE
    finally:
        supervisor.terminate()
        supervisor.wait(20)


def test_credentials_nodes_are_readable_only_by_their_topology_even_when_world_readable(
    clients: list[KazooClient], spawn: Spawn, zk_hosts: str, tmp_path: Path
) -> None:
    secret = write_secret(tmp_path / "zk-auth", f"{SERVICE.user}:{SERVICE.password}")
    flags = ("--zk-auth-file", str(secret), "--zk-world-readable", "true")
    replica = spawn(extra=sync_flags(replicas=1, min_replicas=1) + flags)
    wait_for_agreed_leader([replica], timeout=30)
    with NimbusClient([replica.address]) as nimbus:
        a = submit(nimbus, package(tmp_path, "a")[0], "a").topology_id
        b = submit(nimbus, package(tmp_path, "b")[0], "b").topology_id
    service = connect(zk_hosts, SERVICE)
    stranger = connect(zk_hosts)
    clients.extend([service, stranger])
    for tid in (a, b):
        wait_until(partial(service.exists, Paths(ROOT).credential(tid)), 20)

    # World-readable: anyone may look, nobody else may touch.
    assert set(stranger.get_children(PATHS.storms)) == {a, b}
    records.StormBase.FromString(stranger.get(PATHS.storm(a))[0])
    with pytest.raises(NoAuthError):
        stranger.set(PATHS.storm(a), PAYLOAD)

    creds_a = read_credentials(service, Paths(ROOT), a)
    creds_b = read_credentials(service, Paths(ROOT), b)
    assert creds_a.password != creds_b.password
    as_a = connect(zk_hosts, creds_a.auth)
    clients.append(as_a)
    assert read_credentials(as_a, Paths(ROOT), a) == creds_a
    for client, tid in ((as_a, b), (stranger, a), (stranger, b)):
        with pytest.raises(NoAuthError):
            client.get(Paths(ROOT).credential(tid))
    with pytest.raises(NoAuthError):
        as_a.set(Paths(ROOT).credential(a), PAYLOAD)  # READ only, even its own

    with NimbusClient([replica.address]) as nimbus:
        nimbus.call_leader("KillTopology", pb.KillTopologyRequest(name="a", wait_s=0))
    wait_until(
        lambda: service.exists(Paths(ROOT).credential(a)) is None,
        20,
        message="the killed topology's credentials removed",
    )
    assert service.exists(Paths(ROOT).credential(b)) is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("justauser", "must be 'user:password'"),
        ("svc:", "password is empty"),
        ("s v c:pw", "without ':' or whitespace"),
    ],
    ids=["no-colon", "empty-password", "space-user"],
)
def test_a_malformed_zk_credentials_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_zk_auth(str(write_secret(tmp_path / "secret", text)), environ={})


def test_zk_credentials_come_from_a_file_or_the_environment(tmp_path: Path) -> None:
    good = write_secret(tmp_path / "good", "svc:pw\n")
    assert load_zk_auth(str(good), environ={}) == ZkAuth("svc", "pw")
    assert load_zk_auth(environ={FILE_ENV: str(good)}) == ZkAuth("svc", "pw")
    assert load_zk_auth(environ={SECRET_ENV: "env:pw2"}) == ZkAuth("env", "pw2")
    assert load_zk_auth(environ={}) is None
    assert "pw" not in repr(ZkAuth("svc", "pw"))
    with pytest.raises(ConfigError, match="cannot read ZooKeeper auth file"):
        load_zk_auth(str(tmp_path / "missing"), environ={})
    with pytest.raises(ConfigError, match="needs ZooKeeper auth"):
        load_zk_auth(world_readable=True, environ={})


def test_serve_refuses_a_bad_auth_file_before_touching_zookeeper(tmp_path: Path) -> None:
    bad = write_secret(tmp_path / "bad", "no colon here")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nimbus.cli",
            "serve",
            "--zookeeper",
            "127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--advertise",
            "127.0.0.1:1",
            "--zk-auth-file",
            str(bad),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2
    assert "must be 'user:password'" in result.stderr
