"""Liveness when the kernel cuts the replicas from each other (not from ZooKeeper).

The followers reach ZooKeeper and their clients, but not each other's gRPC port: a code
holder that is alive in ``/nimbuses`` cannot be downloaded from. Seen through the CLI.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.paths import Paths
from devtools.netns import Cut
from tests.chaos.kernel_cluster import ROOT, KernelCluster
from tests.cluster import REPO
from tests.replica_fixtures import package
from tests.waiting import wait_until

CODE_WAIT_S = 6.0
T = 4.0


def _cli(seeds: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nimbus.cli", *args, "--seeds", seeds],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"nimbus {' '.join(args)}: {done.stderr}"
    return done.stdout


def _statuses(seeds: str) -> dict[str, str]:
    rows = json.loads(_cli(seeds, "list", "--json"))
    return {row["name"]: row["status"] for row in rows}


def _held(cluster: KernelCluster, i: int, digest: str) -> list[Path]:
    return list(cluster.replicas[i].code_dir.rglob(digest))


@pytest.mark.timeout(600)
def test_followers_cut_from_each_other_each_lacking_a_package_still_elect(
    kernel_cluster: type[KernelCluster], tmp_path: Path
) -> None:
    cluster = kernel_cluster(tmp_path, session_timeout=T, extra=("--code-wait", str(CODE_WAIT_S)))
    cluster.start()
    try:
        leader, epoch = cluster.wait_healthy(60)
        f1, f2 = [i for i in range(cluster.count) if i != leader]
        digests = {}
        for name in ("a", "b"):
            path, digests[name] = package(tmp_path, name)
            _cli(cluster.seeds, "submit", str(path), "--name", name)
        wait_until(
            lambda: all(_held(cluster, i, d) for i in range(3) for d in digests.values()),
            timeout=60, message="both packages on every replica",
        )  # fmt: skip
        # f1 loses b and f2 loses a while stopped; back up, neither reaches the other.
        lacking = {f1: "b", f2: "a"}
        for i, name in lacking.items():
            cluster.kill(i, signal.SIGTERM)
            for copy in _held(cluster, i, digests[name]):
                copy.unlink()
            cluster.cut(i, Cut.PEERS_GRPC)
            cluster.spawn(i)
        wait_until(
            lambda: all(cluster.replicas[i].alive() for i in lacking)
            and {cluster.replicas[i].address for i in lacking}
            <= set(cluster.admin().get_children(Paths(ROOT).nimbuses)),
            timeout=60, message="both followers back and registered",
        )  # fmt: skip

        killed = time.monotonic()
        cluster.kill(leader, signal.SIGKILL)
        elected = wait_until(
            lambda: next(
                ((i, e) for i, e in cluster.claims().items() if e > epoch and i in lacking), None
            ),
            timeout=CODE_WAIT_S + T + 60, interval=0.1, message="a new leader",
        )  # fmt: skip
        took = time.monotonic() - killed
        assert elected is not None
        new_leader = elected[0]
        print(f"leader {new_leader} in office {took:.2f} s after the kill")
        assert took <= CODE_WAIT_S + T + 2, took

        missing = lacking[new_leader]
        kept = "a" if missing == "b" else "b"
        statuses = wait_until(
            lambda: (s := _statuses(cluster.seeds)).get(missing) == "CODE_MISSING" and s,
            timeout=60, message=f"{missing} marked CODE_MISSING",
        )  # fmt: skip
        assert statuses and statuses[kept] == "ACTIVE", statuses
    finally:
        cluster.stop()
