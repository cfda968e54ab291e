"""Server-side failover per fault at T = 20 s: the fault on the leader to the first answer
of a new leader, as every replica's GetLeaderAddress says it (polled every 50 ms).

Three ``nimbus serve`` replicas in network namespaces (``tests.chaos.kernel_cluster``;
root and iptables), no client load. Per trial: a healthy cluster, the fault on the leader,
poll until one replica claims a newer epoch (or, for the short faults, watch 2 P and
count any new epoch as a false failover), undo the fault, wait until healthy again. Every
poll also checks that no two replicas claim at once.

Run from the repo root as root: ``python bench/failover.py [--quick] [--trials N]``. A
table, then one JSON line; ``--out`` also writes ``bench/results/failover-claims-T20.json``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from _common import (
    REPO,
    cannot_make,
    chosen_faults,
    load_1min,
    machine_facts,
    percentile,
    print_table,
)

from devtools.netns import Cut, available
from leader.settings import DEFAULT_SILENCE_WINDOW
from tests.chaos.kernel_cluster import KernelCluster

SESSION_TIMEOUT = 20.0
POLL_S = 0.05

Fault = tuple[Callable[[KernelCluster, int], None], Callable[[KernelCluster, int], None]]


def _stop(c: KernelCluster, i: int) -> None:
    c.signal(i, signal.SIGSTOP)


def _cont(c: KernelCluster, i: int) -> None:
    c.signal(i, signal.SIGCONT)


def _cut(what: Cut) -> Fault:
    return (lambda c, i: c.cut(i, what)), (lambda c, i: c.heal(i))


#: name -> (inject, undo, a new leader expected)
FAULTS: dict[str, tuple[Callable[[KernelCluster, int], None], Callable[..., None], bool]] = {
    "sigkill": (lambda c, i: c.kill(i, signal.SIGKILL), lambda c, i: c.spawn(i), True),
    "sigstop": (_stop, _cont, True),
    "zk-cut-both": (*_cut(Cut.ZOOKEEPER_BOTH), True),
    "zk-cut-out": (*_cut(Cut.ZOOKEEPER_OUT), True),
    "zk-cut-in": (*_cut(Cut.ZOOKEEPER_IN), True),
    "isolated": (*_cut(Cut.ISOLATED), True),
    "sigstop-1s": (_stop, _cont, False),
    "zk-stop-1s": ((lambda c, i: c.zk.pause(0)), (lambda c, i: c.zk.resume(0)), False),
}


def trial(cluster: KernelCluster, fault: str) -> dict[str, object]:
    inject, undo, expect_new = FAULTS[fault]
    leader, epoch = cluster.wait_healthy(120)
    double = 0
    took: float | None = None
    start = time.monotonic()
    inject(cluster, leader)
    try:
        end = start + (SESSION_TIMEOUT * 2 if expect_new else 2 * DEFAULT_SILENCE_WINDOW)
        undone = False
        while time.monotonic() < end:
            if not expect_new and not undone and time.monotonic() - start >= 1.0:
                undo(cluster, leader)  # the 1 s fault is over; keep watching
                undone = True
            claims = cluster.claims()
            double += len(claims) > 1
            if any(e > epoch for e in claims.values()):
                took = time.monotonic() - start
                break
            time.sleep(POLL_S)  # the poll period of an observation
    finally:
        if expect_new or not undone:
            undo(cluster, leader)
    cluster.wait_healthy(120)
    return {"fault": fault, "new_leader_s": took, "double_claims": double}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one trial per fault")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset")
    parser.add_argument("--out", action="store_true", help="write bench/results/")
    args = parser.parse_args(argv)
    if cannot_make("kernel faults", available()):
        return 2
    faults = chosen_faults(parser, args.faults, FAULTS.__contains__, ", ".join(FAULTS))
    trials: list[dict[str, object]] = []
    load: list[float] = []
    with tempfile.TemporaryDirectory(prefix="failover-") as work:
        cluster = KernelCluster(Path(work), session_timeout=SESSION_TIMEOUT)
        try:
            cluster.start()
            for n in range(1 if args.quick else args.trials):
                for fault in faults:
                    trials.append(trial(cluster, fault))
                    load.append(load_1min())
                    print(f"trial {n + 1} {fault}: {trials[-1]}", file=sys.stderr, flush=True)
        finally:
            cluster.stop()
    rows: dict[str, dict[str, object]] = {}
    for fault in faults:
        mine = [t for t in trials if t["fault"] == fault]
        took = [float(str(t["new_leader_s"])) for t in mine if t["new_leader_s"] is not None]
        rows[fault] = {
            "trials": len(mine),
            "new_leaders": len(took),
            "p50_s": round(percentile(took, 50), 2) if took else None,
            "max_s": round(max(took), 2) if took else None,
            "double_claims": sum(int(str(t["double_claims"])) for t in mine),
        }
    print_table(
        ["fault", "trials", "new leaders", "new leader p50 / max s", "double claims"],
        [
            [f, str(r["trials"]), str(r["new_leaders"]), f"{r['p50_s']} / {r['max_s']}",
             str(r["double_claims"])]
            for f, r in rows.items()
        ],
    )  # fmt: skip
    figures = {
        "session_timeout_s": SESSION_TIMEOUT,
        "faults": rows,
        "load_1min_max": max(load, default=0.0),
        "machine": asdict(machine_facts()),
    }
    if args.out:
        out = REPO / "bench" / "results" / "failover-claims-T20.json"
        out.write_text(json.dumps({**figures, "trials": trials}, indent=2) + "\n")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
