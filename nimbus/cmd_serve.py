"""``nimbus serve``: run one replica until SIGTERM or SIGINT, then hand over and exit 0."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from nimbus.config import NimbusConfig
from nimbus.daemon import NimbusDaemon
from nimbus.envargs import add_env_flag
from nimbus.errors import NimbusError


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("serve", help="run one Nimbus replica")
    add_env_flag(p, "--zookeeper", required=True, help="ZooKeeper connect string")
    add_env_flag(p, "--root", default="/storm", help="ZooKeeper root of this cluster")
    add_env_flag(p, "--listen", default="127.0.0.1:6627", help="gRPC listen HOST:PORT")
    add_env_flag(p, "--advertise", default="", help="address peers and clients use")
    add_env_flag(p, "--session-timeout", type=float, default=10.0, help="seconds")
    add_env_flag(p, "--code-dir", default="nimbus-code", help="local code store folder")
    add_env_flag(p, "--replicas", type=int, default=1, help="replicas the operator runs")
    add_env_flag(
        p, "--min-replicas", type=int, default=0,
        help="replicas that must hold a package before a submit is acknowledged "
        "(default: 2 when --replicas > 1, else 1)",
    )  # fmt: skip
    add_env_flag(p, "--replication-wait", type=float, default=30.0, help="seconds")
    add_env_flag(
        p, "--code-wait", type=float, default=60.0,
        help="seconds a topology whose code no replica holds may block an election",
    )  # fmt: skip
    add_env_flag(p, "--sync-interval", type=float, default=1.0, help="seconds between passes")
    add_env_flag(p, "--max-package-mib", type=float, default=64.0, help="upload size limit")
    add_env_flag(p, "--log-level", default="INFO", help="DEBUG, INFO, WARNING")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=str(args.log_level).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        config = NimbusConfig(
            zookeeper=args.zookeeper,
            root=args.root,
            listen=args.listen,
            advertise=args.advertise,
            session_timeout=float(args.session_timeout),
            code_dir=Path(args.code_dir),
            replicas=int(args.replicas),
            min_replicas=int(args.min_replicas),
            replication_wait=float(args.replication_wait),
            code_wait=float(args.code_wait),
            sync_interval=float(args.sync_interval),
            max_package_mib=float(args.max_package_mib),
        )
        daemon = NimbusDaemon(config)
    except (NimbusError, OSError) as e:
        print(f"nimbus serve: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        daemon.start()
    except NimbusError as e:
        print(f"nimbus serve: {e}", file=sys.stderr)
        return 1
    print(f"serving {config.replica_id} (gRPC port {daemon.port})", flush=True)
    while not stop.wait(0.5):
        pass
    daemon.stop()
    return 0
