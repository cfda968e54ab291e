"""``nimbus zookeeper``: a local ZooKeeper (standalone or ensemble) in the foreground.

For trying the project on one machine without installing ZooKeeper: it uses the jars the
pyspark wheel ships. The connect string is printed as soon as a client can write, and
the last line, ``ZOOKEEPER=<connect string>``, is meant for scripts. SIGINT or SIGTERM
stops every node cleanly and exits 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from cluster.envargs import add_env_flag
from cluster.errors import NimbusError
from devtools.zkserver import ZooKeeperCluster


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``zookeeper`` subcommand to the ``nimbus`` parser."""
    parser = subparsers.add_parser(
        "zookeeper",
        help="run a local ZooKeeper (standalone or ensemble) until interrupted",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--ensemble",
        type=_positive_int,
        default=1,
        metavar="N",
        help="number of nodes (1 = standalone; use 3 for a real quorum) [1]",
    )
    add_env_flag(
        parser,
        "--port",
        type=int,
        default=None,
        help="client port of the first node (others pick free ports) [a free port]",
    )
    add_env_flag(
        parser,
        "--listen-host",
        default="127.0.0.1",
        help="address the client ports listen on (0.0.0.0 in a container) [127.0.0.1]",
    )
    parser.add_argument(
        "--tick-ms",
        type=_positive_int,
        default=200,
        help="ZooKeeper tickTime; sessions may be as short as 2 ticks [200]",
    )
    parser.add_argument(
        "--max-session-timeout-ms",
        type=_positive_int,
        default=60_000,
        help="longest session a client may negotiate [60000]",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep data here across runs (fsync on) [a temp dir, removed on exit]",
    )
    parser.set_defaults(func=run)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    """Start the cluster, print its connect string, and wait for SIGINT or SIGTERM."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    cluster = ZooKeeperCluster(
        size=args.ensemble,
        tick_ms=args.tick_ms,
        max_session_timeout_ms=args.max_session_timeout_ms,
        base_dir=args.data_dir,
        first_client_port=args.port,
        force_sync=args.data_dir is not None,
        client_address=args.listen_host,
    )
    try:
        kind = "standalone" if args.ensemble == 1 else f"{args.ensemble}-node ensemble"
        print(f"starting ZooKeeper ({kind})...", file=sys.stderr, flush=True)
        try:
            cluster.start()
        except NimbusError as exc:
            print(f"nimbus zookeeper: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"data: {cluster.data_dir}", file=sys.stderr, flush=True)
        print(f"connect string: {cluster.connect_string}", flush=True)
        print(f"ZOOKEEPER={cluster.connect_string}", flush=True)
        # A signal that came during start() has already set the event.
        stop.wait()  # lock waits are interruptible: on_signal runs and sets the event
        print("stopping ZooKeeper...", file=sys.stderr, flush=True)
        return 0
    finally:
        cluster.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
