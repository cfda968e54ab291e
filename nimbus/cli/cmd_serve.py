"""``nimbus serve``: run one replica until SIGTERM or SIGINT, then hand over and exit 0."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster.envargs import add_env_flag
from cluster.errors import ConfigError, NimbusError
from leader.settings import DEFAULT_BEAT_INTERVAL, DEFAULT_LEADER_LEASE, DEFAULT_SILENCE_WINDOW
from nimbus.cli import logs
from nimbus.cli.stopping import stop_on_signals
from nimbus.config import make_config
from nimbus.server.malloc import tune_for_streaming

# flag, type, default, help. Values come from, highest first: the flag, the environment
# variable NIMBUS_<FLAG>, the --config file (TOML, keys as flag names), the default.
OPTIONS: list[tuple[str, type, object, str]] = [
    ("--zookeeper", str, None, "ZooKeeper connect string (required)"),
    ("--root", str, "/storm", "ZooKeeper root of this cluster"),
    ("--listen", str, "127.0.0.1:6627", "gRPC listen HOST:PORT"),
    ("--advertise", str, "", "address peers and clients use"),
    ("--session-timeout", float, 10.0, "seconds"),
    ("--code-dir", str, "nimbus-code", "local code store folder"),
    ("--replicas", int, 0, "replicas the operator runs: an upper bound for --min-replicas"),
    (
        "--min-replicas", int, 0,
        "replicas that must hold a package before a submit is acknowledged "
        "(default: 2, or 1 while only one replica is live)",
    ),
    ("--replication-wait", float, 30.0, "seconds"),
    (
        "--code-wait", float, 60.0,
        "seconds a topology whose code no replica holds may block an election",
    ),
    ("--sync-interval", float, 1.0, "seconds between code sync passes"),
    ("--max-package-mib", float, 64.0, "upload size limit"),
    (
        "--validate-timeout", float, 20.0,
        "seconds a submitted topology's build() and validation may take (0: no check)",
    ),
    ("--validate-memory-mib", int, 1024, "memory limit of that check"),
    ("--schedule-interval", float, 1.0, "seconds between scheduler passes"),
    (
        "--heartbeat-timeout", float, 10.0,
        "seconds a worker or supervisor may be silent before its workers move",
    ),
    ("--log-level", str, "INFO", "DEBUG, INFO, WARNING"),
    ("--ui-port", int, 0, "read-only web UI port on the --listen host (0: off)"),
    # Security (README "Security"): secrets only in files or the environment.
    ("--zk-auth-file", str, "", "ZooKeeper digest user:password file (or $NIMBUS_ZK_AUTH)"),
    ("--zk-world-readable", str, "false", "true: anyone may read (not modify) our nodes"),
    ("--tls-cert", str, "", "PEM certificate chain: turns TLS on with --tls-key"),
    ("--tls-key", str, "", "PEM private key of --tls-cert"),
    ("--tls-client-ca", str, "", "PEM CA: clients must present a certificate it signed"),
    ("--tls-ca", str, "", "PEM CA this replica trusts when it calls its peers"),
    (
        "--tls-server-name", str, "",
        "name peers' certificates give, when they do not name the advertised addresses",
    ),
    ("--token-file", str, "", "accepted bearer tokens, one per line: mutating calls need one"),
    ("--auth-reads", str, "false", "true: read-only calls need a token too"),
    ("--log-format", str, "json", "json (one object per line) or text"),
    ("--metrics-port", int, 0, "Prometheus /metrics port on the --listen host (0: off)"),
    ("--k8s-pod", str, "", "this pod's name: label it nimbus-role=leader|follower (empty: off)"),
    ("--shutdown-grace", float, 10.0, "SIGTERM: seconds to hand over and exit, whatever happens"),
    (
        "--preempt-window", float, 0.5,
        "seconds the successor's link to the leader must stay closed, reconnects failing, "
        "before the leader counts as heard dead: its silent beat is then preempted after its "
        "claim (L*(1+rho) + T_op) instead of the silence window (0: always the window)",
    ),
    ("--preempt-interval", float, 0.1, "seconds between the successor's reconnects to the leader"),
    ("--beat-interval", float, DEFAULT_BEAT_INTERVAL, "seconds between beats (H)"),
    (
        "--silence-window", float, DEFAULT_SILENCE_WINDOW,
        "seconds a replica's beat may stay unchanged before the one behind preempts it "
        "(P; 0: wait for its session to expire)",
    ),
    (
        "--leader-lease", float, DEFAULT_LEADER_LEASE,
        "seconds the leader claims leadership after sending its last acknowledged beat "
        "(L; L*(1+rho) + T_op <= P*(1-rho) must hold)",
    ),
]  # fmt: skip


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("serve", help="run one Nimbus replica")
    add_env_flag(p, "--config", default=None, help="a TOML file with any of these options")
    for flag, kind, default, help_text in OPTIONS:
        add_env_flag(p, flag, type=kind, default=None, help=f"{help_text} (default {default!r})")
    p.set_defaults(func=run)


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Merge defaults, the config file, the environment and the flags into one dict."""
    values: dict[str, Any] = {flag[2:].replace("-", "_"): d for flag, _, d, _ in OPTIONS}
    if args.config:
        try:
            with open(args.config, "rb") as f:
                from_file = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read --config {args.config}: {e}") from e
        kinds = {flag[2:].replace("-", "_"): kind for flag, kind, _, _ in OPTIONS}
        for key, value in from_file.items():
            name = key.replace("-", "_")
            if name not in kinds:
                raise ConfigError(f"unknown option {key!r} in {args.config}")
            try:
                values[name] = kinds[name](value)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"bad value for {key!r} in {args.config}: {value!r}") from e
    for name in values:
        given = getattr(args, name, None)
        if given is not None:
            values[name] = given
    if not values["zookeeper"]:
        raise ConfigError("--zookeeper is required (flag, NIMBUS_ZOOKEEPER, or --config)")
    return values


def run(args: argparse.Namespace) -> int:
    try:
        values = resolve(args)
    except NimbusError as e:
        print(f"nimbus serve: {e}", file=sys.stderr)
        return 2
    try:
        log_context = logs.configure(str(values.pop("log_level")), str(values.pop("log_format")))
    except NimbusError as e:
        print(f"nimbus serve: {e}", file=sys.stderr)
        return 2
    tune_for_streaming()
    try:
        config = make_config(**{**values, "code_dir": Path(values["code_dir"])})
        log_context.replica = config.replica_id
        from nimbus.server.daemon import NimbusDaemon  # here: every other command skips its imports

        daemon = NimbusDaemon(config)
        log_context.epoch = daemon.known_epoch
    except (NimbusError, OSError) as e:
        print(f"nimbus serve: {e}", file=sys.stderr)
        return 2
    stop = stop_on_signals()
    try:
        daemon.start()
    except NimbusError as e:
        print(f"nimbus serve: {e}", file=sys.stderr)
        return 1
    print(f"serving {config.replica_id} (gRPC port {daemon.port})", flush=True)
    if daemon.ui is not None:
        print(f"web UI http://{config.advertise.rsplit(':', 1)[0]}:{daemon.ui.port}/", flush=True)
    # Started now, waiting on the signal's event: the hand-over begins as SIGTERM arrives,
    # not after a thread's start-up (a fifth of a millisecond of a graceful handover).
    stopper = threading.Thread(
        target=_stop_on, args=(stop, daemon.stop), name="shutdown", daemon=True
    )
    stopper.start()
    while not stop.wait(0.5):
        pass
    stopper.join(config.shutdown_grace)
    if stopper.is_alive():
        # ZooKeeper unreachable, say: the hand-over could not finish. Exit anyway, as a
        # pod must within its grace period; the session expires and another replica leads.
        print(
            f"nimbus serve: shutdown not finished within --shutdown-grace "
            f"{config.shutdown_grace:g}s; exiting",
            file=sys.stderr,
            flush=True,
        )
        logging.shutdown()
        os._exit(0)
    return 0


def _stop_on(stop: threading.Event, stop_daemon: Callable[[], None]) -> None:
    """The shutdown thread: on the first SIGTERM or SIGINT, the daemon's graceful stop
    (a failure is logged; the main thread exits when this returns or the grace is up)."""
    stop.wait()
    try:
        stop_daemon()
    except Exception:
        logging.getLogger(__name__).exception("graceful stop failed")
