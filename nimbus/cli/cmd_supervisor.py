"""``nimbus supervisor``: run one supervisor until SIGTERM or SIGINT, then leave and exit 0."""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence
from typing import Any

from cluster.envargs import add_env_flag
from cluster.errors import NimbusError
from cluster.security import client as client_security
from cluster.security.client import add_client_flags
from cluster.security.zkauth import export_to_children, load_zk_auth, parse_flag_bool
from nimbus.cli import logs
from nimbus.cli.stopping import stop_on_signals
from nimbus.metrics import MetricsServer, serve_supervisor_metrics
from pipeline.supervisor import (
    Supervisor,
    SupervisorConfig,
    add_worker_arguments,
    worker_options,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_env_flag(p, "--zookeeper", required=True, help="ZooKeeper connect string")
    add_env_flag(p, "--root", default="/storm", help="ZooKeeper root of this cluster")
    add_env_flag(p, "--id", default=socket.gethostname(), help="supervisor id (unique)")
    add_env_flag(p, "--host", default="", help="host name workers are reached at")
    add_env_flag(p, "--slots", type=int, default=4, help="worker slots on this host")
    add_env_flag(p, "--heartbeat-interval", type=float, default=1.0, help="seconds")
    add_env_flag(p, "--session-timeout", type=float, default=10.0, help="seconds")
    add_env_flag(p, "--log-level", default="INFO", help="DEBUG, INFO, WARNING")
    add_env_flag(p, "--log-format", default="json", help="json (one object per line) or text")
    add_env_flag(p, "--metrics-port", type=int, default=0, help="Prometheus /metrics (0: off)")
    add_env_flag(p, "--zk-auth-file", default="", help="user:password file ($NIMBUS_ZK_AUTH)")
    add_env_flag(p, "--zk-world-readable", default="false", help="nodes readable by anyone")
    add_client_flags(p)  # TLS and token for code downloads from replicas
    add_worker_arguments(p)
    p.set_defaults(func=run)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "supervisor", help="run one supervisor (keeps the slots assigned to this host)"
    )
    add_arguments(p)


def run(args: argparse.Namespace) -> int:
    try:
        logs.configure(str(args.log_level), str(args.log_format)).replica = str(args.id)
    except NimbusError as e:
        print(f"nimbus supervisor: {e}", file=sys.stderr)
        return 2
    try:
        world_readable = parse_flag_bool(args.zk_world_readable)
        zk_auth = load_zk_auth(args.zk_auth_file or None, world_readable=world_readable)
        client_security.set_default(client_security.from_args(args))
        export_to_children(args.zk_auth_file, world_readable)  # workers use it too
        config = SupervisorConfig(
            zk_auth=zk_auth,
            zookeeper=args.zookeeper,
            root=args.root,
            supervisor_id=args.id,
            host=args.host,
            slots=int(args.slots),
            heartbeat_interval=float(args.heartbeat_interval),
            session_timeout=float(args.session_timeout),
            **worker_options(args),
        )
    except (NimbusError, ValueError) as e:
        print(f"nimbus supervisor: {e}", file=sys.stderr)
        return 2
    stop = stop_on_signals()
    supervisor = Supervisor(config)
    metrics: MetricsServer | None = None
    try:
        if args.metrics_port:  # first: a taken port fails before anything runs
            metrics = serve_supervisor_metrics(supervisor, int(args.metrics_port))
        supervisor.start()
    except NimbusError as e:
        if metrics is not None:
            metrics.stop()
        print(f"nimbus supervisor: {e}", file=sys.stderr)
        return 1
    print(f"supervising {config.supervisor_id} ({config.slots} slots)", flush=True)
    while not stop.wait(0.5):
        pass
    supervisor.stop()
    if metrics is not None:
        metrics.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nimbus.cli.cmd_supervisor``: the same flags without the ``nimbus`` front end."""
    parser = argparse.ArgumentParser(
        prog="python -m nimbus.cli.cmd_supervisor", description=__doc__
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    # Run the imported module, not this ``__main__`` copy: one set of classes and loggers.
    from nimbus.cli.cmd_supervisor import main as run_main

    sys.exit(run_main())
