"""A replica's connect string must name the servers of its ZooKeeper ensemble one by one.

A replica leaves a server that falls behind its quorum for another host of its connect
string (``cluster.server_move``), and keeps its bulk-read session on the server of its
election session, which it reads from that session's socket (``cluster.session_pin``).
Both need each host of the string to be one server:

- one DNS name for the whole ensemble (``zk:2181`` resolving to every server) leaves no
  other host to move to; and kazoo, which gives an attempt the session timeout divided by
  the number of hosts, lets a stalled server behind that name take the whole session;
- a load-balanced address (a Kubernetes ClusterIP Service) is one address for every
  server: no move has anywhere to go, and a pin to it reaches whichever server the
  balancer picks, so the two sessions read two servers' histories.

Neither can be told from the string alone (a one-server ensemble's name may resolve to
two addresses, IPv4 and IPv6), so the ensemble is asked once connected: its membership
(``/zookeeper/config``, else the ``conf`` four-letter word), and a string of one host for
an ensemble of more than one server is refused. A single server stays allowed.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.hosts import collect_hosts
from kazoo.protocol.serialization import GetData

from cluster.errors import ConfigError

log = logging.getLogger(__name__)

CONFIG_NODE = "/zookeeper/config"  # ZooKeeper's own, outside any chroot


def members(text: str) -> list[str]:
    """The ``server.N=...`` lines of an ensemble's configuration (none: standalone)."""
    return [line.strip() for line in text.splitlines() if line.strip().startswith("server.")]


def ensemble_members(client: KazooClient, timeout: float = 10.0) -> list[str] | None:
    """The members of the ensemble ``client`` is connected to ([]: a standalone server);
    None when the server says neither through its config node nor through ``conf``."""
    try:
        answer = client.handler.async_result()
        # Not client.get: a chroot in the connect string would be put in front of the path.
        client._call(GetData(CONFIG_NODE, None), answer)
        data, _ = answer.get(timeout=timeout)
        found = members(data.decode("utf-8", "replace"))
        if found:
            return found
    except (KazooException, OSError, ValueError, client.handler.timeout_exception) as e:
        log.info("could not read %s (%s); asking 'conf'", CONFIG_NODE, e)
    try:
        return members(client.command(b"conf"))
    except (KazooException, OSError, ValueError) as e:
        log.info("ZooKeeper 'conf' unavailable (%s); the connect string is not checked", e)
        return None


def suggestion(count: int, port: int) -> str:
    return ",".join(f"host{i}:{port}" for i in range(1, count + 1))


def check_servers_listed(client: KazooClient, connect: str, timeout: float = 10.0) -> None:
    """``ConfigError`` when ``connect`` names one host for an ensemble of several servers."""
    hosts, _ = collect_hosts(connect)
    found = ensemble_members(client, timeout)
    if found is None or len(found) <= 1:
        return  # a single server, or an ensemble that does not say
    if len(hosts) > 1:
        if len(hosts) < len(found):
            log.warning(
                "--zookeeper names %d of the ensemble's %d servers: a replica moves only "
                "among those it names",
                len(hosts),
                len(found),
            )
        return
    host, port = hosts[0]
    raise ConfigError(
        f"--zookeeper {connect!r} names one address ({host}:{port}) for a ZooKeeper ensemble "
        f"of {len(found)} servers. Behind one DNS name for them all, or a load-balanced "
        "address (a Kubernetes Service's cluster IP), a replica can neither leave a server "
        "that falls behind its quorum nor keep its bulk-read session on its election "
        "session's server. List the servers one by one instead: "
        f"{suggestion(len(found), port)} (in Kubernetes, the pods through the headless "
        "Service: zk-0.zk-headless:2181,zk-1.zk-headless:2181,zk-2.zk-headless:2181)"
    )
