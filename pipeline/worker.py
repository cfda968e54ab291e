"""``python -m pipeline.worker``: the worker's flags, its ZooKeeper client and signals.

The supervisor starts it; ``pipeline.worker_loop.Worker`` does the work.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from kazoo.handlers.threading import KazooTimeoutError

from cluster.errors import NimbusError
from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from cluster.security.zkauth import zk_auth_from_env
from cluster.zkloop import watch_connection_loop
from pipeline.claims import SlotClaim
from pipeline.errors import PipelineError
from pipeline.failures import one_line, record_failure
from pipeline.worker_loop import (
    EXIT_FAILED,
    EXIT_FENCED,
    EXIT_NO_ZOOKEEPER,
    EXIT_OK,
    FailureHistory,
    Worker,
)

log = logging.getLogger("pipeline.worker")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string")
    p.add_argument("--root", default="/storm", help="ZooKeeper root of this cluster")
    p.add_argument("--topology-id", required=True)
    p.add_argument("--supervisor-id", required=True)
    p.add_argument("--slot", type=int, required=True)
    p.add_argument("--package", required=True, help="topology package: a folder or a zip")
    p.add_argument("--state-dir", required=True, help="checkpoint and unpacked code live here")
    p.add_argument("--heartbeat-interval", type=float, default=1.0, help="seconds")
    p.add_argument("--session-timeout", type=float, default=10.0, help="seconds")
    p.add_argument("--spark-master", default="local[2]", help="Spark master URL")
    p.add_argument(
        "--checkpoint-dir", default="", help="checkpoint folder; default <state-dir>/checkpoint"
    )
    p.add_argument("--host", default=socket.gethostname(), help="named in the worker's claim")
    p.add_argument(
        "--suspended-fraction",
        type=float,
        default=0.3,
        help="stop once SUSPENDED this fraction of the session timeout",
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING")
    history = p.add_argument_group("what the supervisor knows of the slot's earlier workers")
    history.add_argument("--last-error", default="", help="why the last one failed")
    history.add_argument("--failures-in-a-row", type=int, default=0)
    history.add_argument("--restarts", type=int, default=0)
    history.add_argument("--log-path", default="", help="this worker's log, for describe")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.worker", description="run one topology's query for a slot"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=str(args.log_level).upper(),
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:  # the supervisor exported its ZooKeeper identity (a file path, never the secret)
        zk_auth = zk_auth_from_env()
    except NimbusError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2
    client = make_kazoo_client(args.zookeeper, session_timeout=args.session_timeout, auth=zk_auth)
    try:
        client.start(timeout=max(args.session_timeout, 10.0))
    except KazooTimeoutError:
        print(f"worker: could not reach ZooKeeper at {args.zookeeper}", file=sys.stderr)
        client.close()
        return EXIT_NO_ZOOKEEPER
    watch_connection_loop(client, f"worker {args.topology_id}")
    paths = Paths(args.root)
    claim = SlotClaim(
        client,
        paths,
        topology_id=args.topology_id,
        supervisor_id=args.supervisor_id,
        slot=args.slot,
        host=args.host,
        session_timeout=args.session_timeout,
        suspended_fraction=args.suspended_fraction,
    )
    worker = Worker(
        client,
        paths,
        claim=claim,
        heartbeat_interval=args.heartbeat_interval,
        session_timeout=args.session_timeout,
        history=FailureHistory(
            args.last_error, args.failures_in_a_row, args.restarts, args.log_path
        ),
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.start_beating()
    code = EXIT_FAILED
    end = "failed"
    try:
        checkpoint = Path(args.checkpoint_dir) if args.checkpoint_dir else None
        code = worker.run(Path(args.package), Path(args.state_dir), args.spark_master, checkpoint)
        end = {EXIT_OK: "stopped", EXIT_FENCED: "fenced off: claim lost"}.get(
            code, f"failed: {worker.failure or 'the query ended'}"
        )
        if code == EXIT_FAILED:
            record_failure(Path(args.state_dir), worker.failure or "the query ended")
    except PipelineError as e:
        log.error("%s", e)
        end = f"failed: {one_line(e)}"
        record_failure(Path(args.state_dir), one_line(e))
    finally:
        worker.finish_beating(end)
        client.stop()
        client.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
