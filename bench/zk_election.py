"""ZooKeeper's own election when its leader is cut from its peers: the project's server
settings against the same with a bounded round for an unreachable leader.

Starts two 3-server ensembles (tick 200 ms, as the tests' and ``nimbus zookeeper``'s):

* ``project``: as ``devtools.zkspawn`` configures every ensemble this project starts;
* ``bounded``: the same plus ``connectToLearnerMasterLimit`` of 2 s (a follower gives up
  on an elected leader it cannot reach in 2 s, not initLimit, 10 s) and
  ``leader.maxTimeToWaitForEpoch=2000`` (a leader waits 2 s for its followers, not
  initLimit; ZOOKEEPER-3769): a candidate, measured before adopting it.

Each trial cuts the leader of one ensemble, then the other (interleaved), two ways:

* ``one-way``: iptables drops every packet to or from the leader's quorum and election
  ports; the connections it opens to its peers still work. The leader is made the server
  with the highest id first (restarted until it is): its votes then get out and win, and
  it keeps being elected where nobody can connect to it. The worst case of this fault.
* ``whole``: the leader's process cut from its peers both ways (its own ports and what it
  opens to theirs).

Measured: ``elected_s``, from the cut to another server leading (cap 60 s: ``None``);
``whole_after_s``, from the heal (at that election) to every server serving one leader.

Run from the repo root as root: ``python bench/zk_election.py [--quick] [--trials N]``.
The last line of stdout is one JSON object.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from _common import BenchRun, bench_parser, cannot_make, percentile, print_json, print_table

from devtools.netns import LoopbackPortCut, available
from devtools.zkserver import ZooKeeperCluster

CAP_S = 60.0
CONFIGS = ("project", "bounded")
FAULTS = ("one-way", "whole")


def _poll_modes(zk: ZooKeeperCluster) -> list[str | None]:
    return [zk.node_mode(i, timeout=0.5) for i in range(zk.size)]


def _make_highest_lead(zk: ZooKeeperCluster) -> int:
    """Restart the leader until the server with the highest id leads; its index."""
    highest = zk.size - 1
    for _ in range(10):
        zk.heal()
        leader = zk.leader_index()
        if leader == highest:
            return highest
        assert leader is not None
        zk.restart(leader)
    raise RuntimeError("the highest server never became the leader")


def trial(zk: ZooKeeperCluster, fault: str) -> dict[str, Any]:
    if fault == "one-way":
        victim = _make_highest_lead(zk)
        cut = LoopbackPortCut(zk.quorum_ports(victim))
    else:
        zk.heal()
        leader = zk.leader_index()
        assert leader is not None
        victim = leader
        pid = zk.pid(victim)
        peers = [p for j in range(zk.size) if j != victim for p in zk.quorum_ports(j)]
        cut = LoopbackPortCut(zk.quorum_ports(victim), owner=pid, peer_ports=peers)
    start = time.monotonic()
    cut.cut()
    elected: float | None = None
    try:
        while time.monotonic() - start < CAP_S:
            modes = _poll_modes(zk)
            if any(m == "leader" for i, m in enumerate(modes) if i != victim):
                elected = time.monotonic() - start
                break
            time.sleep(0.1)
    finally:
        cut.heal()
    healed = time.monotonic()
    while time.monotonic() - healed < CAP_S:
        modes = _poll_modes(zk)
        if all(modes) and modes.count("leader") == 1:
            break
        time.sleep(0.1)
    whole_after = time.monotonic() - healed
    return {
        "victim": victim,
        "elected_s": None if elected is None else round(elected, 2),
        "whole_after_s": round(whole_after, 2),
    }


def _p(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 2) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "2 trials of each fault and configuration")
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args(argv)
    if cannot_make("kernel cuts", available(cgroups=True)):
        return 2
    run = BenchRun.start(quick=args.quick)
    trials = 2 if args.quick else args.trials
    bounded = ("connectToLearnerMasterLimit=10", "leader.maxTimeToWaitForEpoch=2000")
    ensembles = {
        "project": ZooKeeperCluster(size=3),
        "bounded": ZooKeeperCluster(size=3, extra_config=bounded),
    }
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        c: {f: [] for f in FAULTS} for c in CONFIGS
    }
    try:
        for zk in ensembles.values():
            zk.start()
        for n in range(trials):
            for fault in FAULTS:
                for config in CONFIGS:
                    got = trial(ensembles[config], fault)
                    results[config][fault].append(got)
                    print(f"trial {n + 1} {fault} {config}: {got}", file=sys.stderr, flush=True)
    finally:
        for zk in ensembles.values():
            zk.stop()
    rows, figures = [], {}
    for fault in FAULTS:
        for config in CONFIGS:
            got = results[config][fault]
            elected = [t["elected_s"] for t in got if t["elected_s"] is not None]
            after = [t["whole_after_s"] for t in got]
            row = {
                "trials": len(got),
                "elected_p50_s": _p(elected, 50),
                "elected_p99_s": _p(elected, 99),
                "elected_max_s": max(elected, default=None),
                "not_elected_in_cap": len(got) - len(elected),
                "whole_after_p50_s": _p(after, 50),
                "whole_after_p99_s": _p(after, 99),
                "trial_details": got,
            }
            figures[f"{fault}/{config}"] = row
            rows.append(
                [fault, config, len(got), f"{row['elected_p50_s']} / {row['elected_p99_s']}",
                 str(row["elected_max_s"]), row["not_elected_in_cap"],
                 f"{row['whole_after_p50_s']} / {row['whole_after_p99_s']}"]
            )  # fmt: skip
    print_table(
        ["fault", "config", "trials", "elected p50/p99 s", "max s", f"over {CAP_S:g} s",
         "whole after heal p50/p99 s"],
        rows,
    )  # fmt: skip
    print_json({"bench": "zk_election", "cap_s": CAP_S, "rows": figures, **run.footer()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
