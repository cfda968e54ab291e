"""The supervisor's worker flags on the command line, and the config fields they make.

Invariant: each flag added by ``add_worker_arguments`` has exactly one ``SupervisorConfig``
keyword in ``worker_options``; the rest of ``nimbus supervisor``'s flags live with its
command (``nimbus.cli.cmd_supervisor``).
"""

from __future__ import annotations

import argparse
import os
from typing import TypedDict


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    """Worker flags; ``nimbus.cli.cmd_supervisor.add_arguments`` should call this too."""
    p.add_argument(
        "--no-workers",
        action="store_true",
        default=os.environ.get("NIMBUS_NO_WORKERS", "") not in ("", "0", "false"),
        help="heartbeat assigned slots only, start no worker processes (tests without Spark)",
    )
    p.add_argument(
        "--state-dir",
        default=os.environ.get("NIMBUS_STATE_DIR", ""),
        help="code store and worker folders (checkpoints); default <tmp>/nimbus-supervisor-<id>",
    )
    p.add_argument(
        "--spark-master",
        default=os.environ.get("NIMBUS_SPARK_MASTER", "local[2]"),
        help="Spark master URL for workers",
    )
    p.add_argument(
        "--worker-stop-timeout",
        type=float,
        default=float(os.environ.get("NIMBUS_WORKER_STOP_TIMEOUT", "45")),
        help="seconds between SIGTERM and SIGKILL when stopping a worker",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("NIMBUS_CHECKPOINT_DIR", ""),
        help="workers' checkpoints as <dir>/<topology-id>; a folder every supervisor shares "
        "lets a moved slot resume where it stopped (default: under each worker's folder)",
    )
    p.add_argument(
        "--suspended-fraction",
        type=float,
        default=float(os.environ.get("NIMBUS_SUSPENDED_FRACTION", "0.3")),
        help="a worker stops its query once its ZooKeeper connection was SUSPENDED for "
        "this fraction of the session timeout",
    )


class WorkerOptions(TypedDict):
    workers: bool
    state_dir: str
    spark_master: str
    worker_stop_timeout: float
    checkpoint_dir: str
    suspended_fraction: float


def worker_options(args: argparse.Namespace) -> WorkerOptions:
    """``SupervisorConfig`` keyword arguments from ``add_worker_arguments``' flags."""
    return {
        "workers": not bool(args.no_workers),
        "state_dir": str(args.state_dir),
        "spark_master": str(args.spark_master),
        "worker_stop_timeout": float(args.worker_stop_timeout),
        "checkpoint_dir": str(args.checkpoint_dir),
        "suspended_fraction": float(args.suspended_fraction),
    }
