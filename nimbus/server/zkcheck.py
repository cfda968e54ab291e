"""Compare the session timeout ZooKeeper will grant with the one configured.

The server clamps every session to [minSessionTimeout, maxSessionTimeout]. A replica
configured for 10 s that silently gets 40 s would keep a dead leader's lock for 40 s;
one that gets 4 s would lose leadership on ordinary pauses. kazoo does not expose the
negotiated value, so it is derived from the server's ``conf`` four-letter word (when
the server allows it) and refused at start when it differs.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from cluster.errors import ConfigError

log = logging.getLogger(__name__)


def session_bounds(client: KazooClient) -> tuple[float, float] | None:
    """The server's (min, max) session timeout in seconds, None when it won't say."""
    try:
        conf = client.command(b"conf")
    except (KazooException, OSError, ValueError) as e:
        log.info("ZooKeeper 'conf' unavailable (%s); session timeout not checked", e)
        return None
    fields = dict(line.split("=", 1) for line in conf.splitlines() if "=" in line)
    try:
        return int(fields["minSessionTimeout"]) / 1000, int(fields["maxSessionTimeout"]) / 1000
    except (KeyError, ValueError):
        log.info("ZooKeeper 'conf' has no session bounds; session timeout not checked")
        return None


def check_session_timeout(client: KazooClient, configured: float) -> float:
    """The timeout the server grants; ``ConfigError`` when it differs from ``configured``."""
    bounds = session_bounds(client)
    if bounds is None:
        return configured
    low, high = bounds
    granted = min(max(configured, low), high)
    if abs(granted - configured) > 0.001:
        raise ConfigError(
            f"ZooKeeper grants sessions of {low:g}-{high:g} s, so --session-timeout "
            f"{configured:g} would become {granted:g} s; choose a value in that range "
            "(or change the server's min/maxSessionTimeout)"
        )
    return granted
