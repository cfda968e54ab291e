"""Run one topology package to completion against a Spark master, in a process of its own.

What a worker does with its package, minus ZooKeeper (no claim, no heartbeat, no fence):
unpack it, make the SparkSession with the package folder on the executors' PYTHONPATH,
load the topology, run it with ``available_now`` and wait for every query to end. A
SparkSession is per process, so a test that wants a session on another master (a
standalone cluster) runs this instead of making a second session inside pytest.

Prints one JSON line on success: ``{"app_id", "master", "seconds"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pipeline.package import load_topology, unpack_package
from pipeline.runner import run
from pipeline.session import make_spark


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", required=True, help="a topology folder or zip")
    parser.add_argument("--spark-master", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--app-name", default="nimbus-run-topology")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    started = time.monotonic()
    root = unpack_package(args.package)
    spark = make_spark(args.spark_master, args.app_name, python_path=[root])
    try:
        topology = load_topology(root)
        with run(topology, spark, args.checkpoint_dir, name=args.app_name) as running:
            if not running.await_termination(args.timeout):
                print(f"topology still running after {args.timeout} s", file=sys.stderr)
                return 1
        report = {
            "app_id": spark.sparkContext.applicationId,
            "master": spark.sparkContext.master,
            "seconds": round(time.monotonic() - started, 1),
        }
        print(json.dumps(report), flush=True)
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
