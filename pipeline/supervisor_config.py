"""A supervisor's configuration: validated once, derived defaults filled by a function.

Invariant: a ``SupervisorConfig`` is never changed after construction. Its validation runs
in ``__post_init__``, so a bad flag fails before anything connects; the two values that
default to something of this machine (``host``, ``state_dir``) are filled by ``resolved``,
which builds a new value rather than writing into a frozen one.
"""

from __future__ import annotations

import re
import socket
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from cluster.errors import ConfigError
from cluster.paths import valid_root
from cluster.security.zkauth import ZkAuth

_ID_RE = re.compile(r"[A-Za-z0-9._:-]+")


@dataclass(frozen=True)
class SupervisorConfig:
    """Validated at construction, so a bad flag fails before anything connects."""

    zookeeper: str
    supervisor_id: str
    root: str = "/storm"
    slots: int = 4
    heartbeat_interval: float = 1.0
    session_timeout: float = 10.0
    host: str = ""  # what SlotAssignment.host says; "" -> this machine's FQDN (``resolved``)
    connect_timeout: float = 30.0
    # Off unless asked: a config built without it keeps the heartbeat-only behaviour; the
    # command line turns it on unless --no-workers.
    workers: bool = False
    # Code store and worker folders; "" -> <tmp>/nimbus-supervisor-<id> (``resolved``).
    state_dir: str = ""
    spark_master: str = "local[2]"
    worker_stop_timeout: float = 45.0  # SIGTERM, then SIGKILL after this many seconds
    restart_backoff: float = 1.0  # first restart delay; doubles per crash, with jitter
    restart_backoff_max: float = 60.0
    checkpoint_dir: str = ""  # workers' checkpoints: <dir>/<topology-id>; "" -> each worker's own
    suspended_fraction: float = 0.3  # a worker stops once SUSPENDED this part of the session
    zk_auth: ZkAuth | None = None  # digest identity and ACL of every node it creates

    def __post_init__(self) -> None:
        if not self.zookeeper.strip():
            raise ConfigError("--zookeeper is required (a connect string, host:port[,...])")
        if not valid_root(self.root):
            raise ConfigError(
                f"--root must be an absolute ZooKeeper path like /storm, got {self.root!r}"
            )
        if not _ID_RE.fullmatch(self.supervisor_id) or self.supervisor_id in (".", ".."):
            raise ConfigError(
                f"--id must be letters, digits and . _ : - only, got {self.supervisor_id!r}"
            )
        if not 0 <= self.slots <= 1024:
            raise ConfigError(f"--slots must be between 0 and 1024, got {self.slots}")
        if not 1.0 <= self.session_timeout <= 120.0:
            raise ConfigError(
                f"--session-timeout must be between 1 and 120 seconds, got {self.session_timeout}"
            )
        if not 0 < self.heartbeat_interval < self.session_timeout:
            raise ConfigError(
                f"--heartbeat-interval must be > 0 and below the session timeout "
                f"({self.session_timeout}s), got {self.heartbeat_interval}"
            )
        if self.connect_timeout < self.session_timeout:
            raise ConfigError(
                f"connect timeout ({self.connect_timeout}s) must be at least the session "
                f"timeout ({self.session_timeout}s)"
            )
        if not self.spark_master.strip():
            raise ConfigError("--spark-master must be a Spark master URL like local[2]")
        if self.worker_stop_timeout <= 0:
            raise ConfigError(
                f"--worker-stop-timeout must be positive, got {self.worker_stop_timeout}"
            )
        if not 0 < self.suspended_fraction <= 1:
            raise ConfigError(
                f"--suspended-fraction must be in (0, 1], got {self.suspended_fraction}"
            )
        if not 0 < self.restart_backoff <= self.restart_backoff_max:
            raise ConfigError(
                f"restart backoff must be > 0 and at most its maximum "
                f"({self.restart_backoff_max}s), got {self.restart_backoff}"
            )


def resolved(config: SupervisorConfig) -> SupervisorConfig:
    """``config`` with its machine defaults filled in, as a new value (``config`` if none).

    An empty ``host`` becomes this machine's FQDN; an empty ``state_dir`` becomes
    ``<tmp>/nimbus-supervisor-<id>``. A ``Supervisor`` runs on the resolved value only.
    """
    host = config.host or socket.getfqdn()
    state_dir = config.state_dir or str(
        Path(tempfile.gettempdir()) / f"nimbus-supervisor-{config.supervisor_id}"
    )
    if (host, state_dir) == (config.host, config.state_dir):
        return config
    return replace(config, host=host, state_dir=state_dir)
