"""One frozen configuration object, validated when it is made."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.errors import ConfigError
from cluster.paths import Paths, valid_root
from cluster.security.zkauth import parse_flag_bool
from leader.settings import (
    DEFAULT_BEAT_INTERVAL,
    DEFAULT_LEADER_LEASE,
    DEFAULT_SILENCE_WINDOW,
    BeatSettings,
)

DEFAULT_SESSION_TIMEOUT = 10.0
DEFAULT_REPLICATION_WAIT = 30.0


def parse_address(value: str, what: str) -> tuple[str, int]:
    """``host:port`` -> (host, port), with an error that names the flag."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{what} must be HOST:PORT, got {value!r}")
    try:
        number = int(port)
    except ValueError as e:
        raise ConfigError(f"{what} has a non-numeric port: {value!r}") from e
    if not 0 <= number <= 65535:
        raise ConfigError(f"{what} port out of range: {value!r}")
    return host, number


@dataclass(frozen=True)
class NimbusConfig:
    zookeeper: str
    listen: str
    advertise: str = ""
    root: str = "/storm"
    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    code_dir: Path = field(default_factory=lambda: Path("nimbus-code"))
    connect_timeout: float = 30.0  # make_config: the larger of 30 s and the session timeout
    replicas: int = 0  # an upper bound for min_replicas when set; 0: not set
    min_replicas: int = 0  # 0: min(2, live replicas in /nimbuses), counted at each submit
    replication_wait: float = DEFAULT_REPLICATION_WAIT
    code_wait: float = 60.0
    sync_interval: float = 1.0
    schedule_interval: float = 1.0  # seconds between scheduler passes
    heartbeat_timeout: float = 10.0  # a worker or supervisor silent this long is moved off
    max_package_mib: float = 64.0
    validate_timeout: float = 20.0  # the sandboxed check of a submitted build(); 0: off
    validate_memory_mib: int = 1024
    gc_grace: float = 120.0  # make_config: twice the replication wait plus a minute
    ui_port: int = 0  # the read-only web UI on the --listen host; 0: not served
    # Security (README "Security"); all off by default. Secrets only in files or env.
    zk_auth_file: str = ""  # user:password file; else $NIMBUS_ZK_AUTH_FILE, $NIMBUS_ZK_AUTH
    zk_world_readable: bool = False  # nodes readable by anyone (still only we modify)
    tls_cert: str = ""  # PEM certificate chain; with tls_key turns TLS on
    tls_key: str = ""
    tls_client_ca: str = ""  # set: clients must present a certificate it signed
    tls_ca: str = ""  # what this replica trusts when it calls its peers
    tls_server_name: str = ""  # name in peers' certificates when they do not name addresses
    token_file: str = ""  # accepted bearer tokens, one per line: mutating calls need one
    auth_reads: bool = False  # read-only calls need a token too
    metrics_port: int = 0  # Prometheus /metrics on the --listen host; 0: not served
    k8s_pod: str = ""  # this pod's name: label it nimbus-role=leader|follower; "": off
    shutdown_grace: float = 10.0  # SIGTERM: hand over and exit within this many seconds
    preempt_window: float = 0.5  # link closed, reconnects failing this long: heard dead; 0: off
    preempt_interval: float = 0.1  # seconds between the successor's reconnects to the leader
    beat_interval: float = DEFAULT_BEAT_INTERVAL  # H: every queued replica beats this often
    silence_window: float = DEFAULT_SILENCE_WINDOW  # P: a beat unchanged this long preempts
    leader_lease: float = DEFAULT_LEADER_LEASE  # L: claims end this long after a beat's send

    def __post_init__(self) -> None:
        """Validation only: derived values are computed by ``make_config`` beforehand."""
        for flag in ("zk_world_readable", "auth_reads"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"--{flag.replace('_', '-')} must be true or false")
        if not self.zookeeper.strip():
            raise ConfigError("--zookeeper is required (a connect string, host:port[,...])")
        if not valid_root(self.root):
            raise ConfigError(
                f"--root must be an absolute ZooKeeper path like /storm, got {self.root!r}"
            )
        _, listen_port = parse_address(self.listen, "--listen")
        host, port = parse_address(self.advertise, "--advertise")
        if port == 0:
            raise ConfigError("--advertise needs a real port (not 0); set --listen's port")
        if host in ("0.0.0.0", "::"):
            raise ConfigError("--advertise must be an address peers can reach, not a wildcard")
        if not 1.0 <= self.session_timeout <= 120.0:
            raise ConfigError(
                f"--session-timeout must be between 1 and 120 seconds, got {self.session_timeout}"
            )
        if self.replicas < 0:
            raise ConfigError(f"--replicas must be at least 1 (0: not set), got {self.replicas}")
        if self.min_replicas < 0:
            raise ConfigError(
                f"--min-replicas must be at least 1 (0: the default rule), got {self.min_replicas}"
            )
        if self.replicas and self.min_replicas > self.replicas:
            raise ConfigError(
                f"--min-replicas ({self.min_replicas}) must not exceed --replicas "
                f"({self.replicas}): a submission could never be acknowledged"
            )
        if self.replication_wait <= 0 or self.code_wait <= 0 or self.sync_interval <= 0:
            raise ConfigError("--replication-wait, --code-wait and --sync-interval must be > 0")
        if self.validate_timeout < 0:
            raise ConfigError(
                f"--validate-timeout must be >= 0 (0 turns the check off), "
                f"got {self.validate_timeout}"
            )
        if self.validate_memory_mib < 256:
            raise ConfigError(
                f"--validate-memory-mib must be at least 256, got {self.validate_memory_mib}"
            )
        if not 0 < self.max_package_mib <= 1024:
            raise ConfigError(f"--max-package-mib must be in (0, 1024], got {self.max_package_mib}")
        if not 0 < self.schedule_interval < self.heartbeat_timeout:
            raise ConfigError(
                f"--schedule-interval ({self.schedule_interval}s) must be > 0 and below "
                f"--heartbeat-timeout ({self.heartbeat_timeout}s)"
            )
        if self.gc_grace <= self.replication_wait:
            raise ConfigError(
                f"code GC grace ({self.gc_grace}s) must exceed the replication wait "
                f"({self.replication_wait}s), or a submission still waiting for replicas "
                "could lose its code"
            )
        for flag, value in (("--metrics-port", self.metrics_port), ("--ui-port", self.ui_port)):
            if not 0 <= value <= 65535:
                raise ConfigError(f"{flag} must be within 0..65535, got {value}")
            if value and value == listen_port:
                raise ConfigError(f"{flag} {value} is the gRPC port too")
        if self.connect_timeout < self.session_timeout:
            raise ConfigError(
                f"connect timeout ({self.connect_timeout}s) must be at least the session "
                f"timeout ({self.session_timeout}s)"
            )
        if self.preempt_window < 0 or self.preempt_interval <= 0:
            raise ConfigError(
                f"--preempt-window must be >= 0 (0: off) and --preempt-interval > 0, got "
                f"{self.preempt_window} and {self.preempt_interval}"
            )
        self.beats  # noqa: B018 -- validates H, P, L and their margin rule
        if self.shutdown_grace <= 0:
            raise ConfigError(f"--shutdown-grace must be > 0, got {self.shutdown_grace}")

    @property
    def paths(self) -> Paths:
        """The ZooKeeper layout under ``root``."""
        return Paths(self.root)

    @property
    def beats(self) -> BeatSettings:
        """H, P and L (DESIGN item 8); raises ``ConfigError`` naming a broken rule."""
        return BeatSettings(
            interval=self.beat_interval,
            silence_window=self.silence_window,
            leader_lease=self.leader_lease,
        )

    @property
    def replica_id(self) -> str:
        return self.advertise

    @property
    def max_package_bytes(self) -> int:
        return int(self.max_package_mib * 1024 * 1024)


def make_config(**values: Any) -> NimbusConfig:
    """The one way to make a ``NimbusConfig``: derived defaults computed, then validated.

    ``values`` are ``NimbusConfig`` fields as flags, env or a TOML file give them: the
    boolean flags may be strings ("true", "0", ...), and 0 or "" asks for the default
    derived from other fields (``advertise``, ``gc_grace``, ``connect_timeout``).
    """
    for flag in ("zk_world_readable", "auth_reads"):
        if flag in values:
            try:
                values[flag] = parse_flag_bool(values[flag])
            except ValueError as e:
                raise ConfigError(f"--{flag.replace('_', '-')}: {e}") from e
    if not values.get("advertise"):
        host, port = parse_address(str(values.get("listen", "")), "--listen")
        if host in ("0.0.0.0", "::", "[::]", ""):
            host = socket.getfqdn()
        values["advertise"] = f"{host}:{port}"
    if not values.get("gc_grace"):
        wait = float(values.get("replication_wait", DEFAULT_REPLICATION_WAIT))
        values["gc_grace"] = 2 * wait + 60.0
    if not values.get("connect_timeout"):
        session = float(values.get("session_timeout", DEFAULT_SESSION_TIMEOUT))
        values["connect_timeout"] = max(30.0, session)
    try:
        return NimbusConfig(**values)
    except TypeError as e:
        raise ConfigError(f"unknown setting: {e}") from e
