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
