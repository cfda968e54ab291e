"""``cluster.ensemble_listing`` on real servers: a connect string of one address for an
ensemble of three (one DNS name for all, or a load-balanced address: to the client both
are one host) is refused, by the library and by ``nimbus serve`` at start; the servers
listed one by one, and a single server under a name of two addresses, are accepted."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.ensemble_listing import check_servers_listed, ensemble_members
from cluster.errors import ConfigError
from devtools.zkserver import ZooKeeperCluster, free_ports
from tests.zk_fixtures import kazoo_session

REPO = Path(__file__).resolve().parent.parent
NO_CHROOT = "ignore:No chroot path exists"  # kazoo's warning: the chroot is never used


@pytest.mark.filterwarnings(NO_CHROOT)
def test_the_ensemble_says_its_members(healthy_ensemble: ZooKeeperCluster) -> None:
    with kazoo_session(healthy_ensemble.node_connect_string(0) + "/some/chroot") as client:
        found = ensemble_members(client)  # its config node, read past the chroot
    assert found is not None and len(found) == 3
    assert all(line.startswith("server.") for line in found)


def test_one_address_for_an_ensemble_is_refused(healthy_ensemble: ZooKeeperCluster) -> None:
    """A load-balanced address: one address, a server of three behind it."""
    port = healthy_ensemble.client_ports[0]
    connect = f"127.0.0.1:{port}"
    with kazoo_session(connect) as client, pytest.raises(ConfigError) as refused:
        check_servers_listed(client, connect)
    message = str(refused.value)
    assert f"names one address (127.0.0.1:{port}) for a ZooKeeper ensemble of 3" in message
    assert f"List the servers one by one instead: host1:{port},host2:{port},host3:{port}" in (
        message
    )


@pytest.mark.filterwarnings(NO_CHROOT)
def test_one_dns_name_for_an_ensemble_is_refused(healthy_ensemble: ZooKeeperCluster) -> None:
    """``localhost`` here stands for a name of the whole ensemble (``zk:2181``): a string
    of one name, with a chroot, which the membership read must see past."""
    connect = f"localhost:{healthy_ensemble.client_ports[1]}/nimbus"
    with kazoo_session(connect) as client, pytest.raises(ConfigError, match="one by one"):
        check_servers_listed(client, connect)


def test_the_servers_listed_one_by_one_are_accepted(healthy_ensemble: ZooKeeperCluster) -> None:
    connect = healthy_ensemble.connect_string
    with kazoo_session(connect) as client:
        check_servers_listed(client, connect)


def test_a_single_server_is_accepted_whatever_its_name_resolves_to(
    zk_server: ZooKeeperCluster,
) -> None:
    port = zk_server.client_ports[0]
    connect = f"localhost:{port}"  # 127.0.0.1, and ::1 where the resolver says so
    addresses = {info[4][0] for info in socket.getaddrinfo("localhost", port)}
    assert "127.0.0.1" in addresses
    with kazoo_session(connect) as client:
        assert ensemble_members(client) == []
        check_servers_listed(client, connect)


def test_serve_refuses_one_address_for_an_ensemble_at_start(
    healthy_ensemble: ZooKeeperCluster, tmp_path: Path
) -> None:
    port = healthy_ensemble.client_ports[2]
    done = subprocess.run(
        [
            sys.executable, "-m", "nimbus.cli", "serve",
            "--zookeeper", f"127.0.0.1:{port}", "--root", "/listing-refused",
            "--listen", f"127.0.0.1:{free_ports(1)[0]}", "--code-dir", str(tmp_path / "code"),
        ],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"nimbus serve: --zookeeper '127.0.0.1:{port}' names one address" in done.stderr
    assert "List the servers one by one" in done.stderr
