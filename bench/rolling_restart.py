"""Rolling restart: does a leader keep serving writes while every replica is restarted?

Starts its own standalone ZooKeeper and three ``nimbus serve`` replicas (processes on
loopback, a fresh ``--root``), submits one topology, then runs a writer that alternates
``DeactivateTopology`` / ``ActivateTopology`` through ``NimbusClient`` (it follows
redirects and retries ``UNAVAILABLE``; each call is one fenced write on the leader) and
records when each write is acknowledged. Then replicas are restarted in the order
``deploy/containers/rollout`` uses: each round the followers first, then the leader,
after ``nimbus handover --to`` a replica this round already restarted (so a round moves
leadership once, onto a replica that will not be restarted again in the round). A
restart is SIGTERM, wait for the exit, start again on the same port and code folder,
wait until ready (health SERVING, it names the leader, every replica lists all three).
``--quick`` does one round (3 restarts), the full run five (15).

The figures: ``handovers``, the leader changes the writer saw (distinct epochs of its
acknowledged writes, minus one; not the handover calls made), and the longest gap
between two acknowledged writes while restarts run, against the longest gap of the
same writer before any restart (the baseline). Run from the repo root: ``python
bench/rolling_restart.py [--quick]``; the line before last is every figure as one JSON
object, the last line the summary ``{"rounds", "handovers", "longest_write_gap_s",
"failed_writes"}``. It exits 0 whenever it ran: the figures are the finding.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _replicas
import grpc
from _common import (
    REPO,
    BenchError,
    BenchRun,
    bench_parser,
    exit_on_sigterm,
    free_port,
    load_1min,
    machine_facts,
    percentile,
    print_json,
    print_table,
)
from _replicas import Bed, fresh_bed, stop_all, tails
from grpc_health.v1 import health_pb2

from cluster.api import pb
from code_sync.package import make_package
from nimbus.client import NimbusCallError, NimbusClient

REPLICAS = 3
SESSION_TIMEOUT_S = 4.0
QUICK_ROUNDS, FULL_ROUNDS = 1, 5
QUICK_BASELINE_S, FULL_BASELINE_S = 3.0, 10.0
SETTLE_S = 0.5  # after a replacement is ready, before the next SIGTERM
TARGET_GAP_S = 0.5
TARGET_HANDOVERS_PER_ROUND = 1
HANDOVER_TIMEOUT_S = 30.0  # a just-restarted target may not be queued yet: asked again
READY_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0
TOPOLOGY = "rolling"
# The writer's client: a short per-call timeout and backoff, as an operator would
# configure a client that must ride failovers.
CLIENT = {"call_timeout": 2.0, "attempts": 200, "deadline": 60.0, "max_backoff": 0.1}

_SERVING = health_pb2.HealthCheckResponse.SERVING


@dataclass
class Replica(_replicas.Replica):
    bed: Bed

    def start(self) -> None:
        extra = ("--replicas", str(REPLICAS), "--min-replicas", "2", "--sync-interval", "0.5")
        self.bed.serve(self, SESSION_TIMEOUT_S, extra)


def new_replica(bed: Bed) -> Replica:
    port = free_port()
    return Replica(port, bed.log_path(port), bed=bed)


def wait_ready(replicas: list[Replica], timeout: float = READY_TIMEOUT_S) -> str:
    """Until every replica serves, names the same leader and lists all; returns the leader."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(r.serving() for r in replicas):
            named = {r.leader() for r in replicas}
            if (
                len(named) == 1
                and None not in named
                and all(len(r.registered() or ()) == len(replicas) for r in replicas)
            ):
                ((leader, _),) = named  # type: ignore[misc]
                return str(leader)
        time.sleep(0.02)
    raise BenchError(f"replicas not ready within {timeout:.0f}s\n{tails(replicas)}")


@dataclass
class Writer:
    """Alternates deactivate/activate through the client; records each acknowledgement."""

    seeds: list[str]
    acks: list[float] = field(default_factory=list)  # monotonic time of each acknowledgement
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    epochs: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CLIENT["deadline"] + 5)

    def _run(self) -> None:
        methods = ("DeactivateTopology", "ActivateTopology")
        with NimbusClient(self.seeds, **CLIENT) as client:  # type: ignore[arg-type]
            i = 0
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    client.call_leader(methods[i % 2], pb.TopologyNameRequest(name=TOPOLOGY))
                except Exception as e:  # counted and shown: a failed write is the finding
                    self.failures.append(f"{type(e).__name__}: {e}")
                    continue
                done = time.monotonic()
                self.acks.append(done)
                self.latencies_ms.append((done - started) * 1000)
                self.epochs.add(client.max_epoch_seen)
                i += 1


def max_gap(acks: list[float], start: float, end: float) -> float:
    """The longest time without an acknowledgement within [start, end]."""
    inside = [t for t in acks if start <= t <= end]
    points = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(points))


@dataclass
class Step:
    address: str
    was_leader: bool  # led when its turn came (then handed over first)
    leader_before: str
    handover_ms: float | None
    exit_code: int | None
    exit_ms: float
    ready_s: float
    gap_ms: float
    leader_after: str


def hand_over(seeds: list[str], to: str) -> pb.HandoverResponse:
    """``nimbus handover --to``; asked again while ``to`` is not queued yet (a replica
    queues once its code is checked, a moment after it answers health checks)."""
    deadline = time.monotonic() + HANDOVER_TIMEOUT_S
    with NimbusClient(seeds) as client:
        while True:
            try:
                reply = client.handover(to)
            except NimbusCallError as e:
                if e.code != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # a poll's pace: asked again until queued or the deadline
                continue
            if reply.address != to:
                raise BenchError(f"handed over to {to}, but {reply.address} took office")
            return reply


def rollout_order(replicas: list[Replica], leader: str) -> list[Replica]:
    """Followers first (highest ordinal first, as a StatefulSet), the leader last."""
    followers = [r for r in reversed(replicas) if r.address != leader]
    return followers + [r for r in replicas if r.address == leader]


def submit_topology(seeds: list[str], workdir: Path) -> None:
    """The word-count example: a real topology the leader validates (no supervisor runs it)."""
    config = {"input": str(workdir / "input"), "output": str(workdir / "output")}
    path = make_package(
        {
            "topology.py": (REPO / "examples" / "wordcount" / "topology.py").read_bytes(),
            "config.json": json.dumps(config).encode(),
        },
        workdir / "rolling.zip",
    )
    data = path.read_bytes()
    header = pb.SubmitHeader(
        name=TOPOLOGY, expected_digest=hashlib.sha256(data).hexdigest(), package_size=len(data)
    )
    with NimbusClient(seeds) as client:
        client.submit(header, lambda: iter([data]))


def rolling_restart(replicas: list[Replica], writer: Writer, rounds: int) -> list[Step]:
    steps: list[Step] = []
    seeds = [r.address for r in replicas]
    for _ in range(rounds):
        restarted: list[Replica] = []
        for replica in rollout_order(replicas, wait_ready(replicas)):
            leader = wait_ready(replicas)
            signalled = time.monotonic()
            handover_ms = None
            if replica.address == leader:  # never the first in a round: followers go first
                hand_over(seeds, to=restarted[0].address)
                handover_ms = (time.monotonic() - signalled) * 1000
                wait_ready(replicas)
            stopping = time.monotonic()
            replica.stop(signal.SIGTERM, EXIT_TIMEOUT_S)
            code = replica.returncode
            exited = time.monotonic()
            replica.start()
            leader_after = wait_ready(replicas)
            ready = time.monotonic()
            time.sleep(SETTLE_S)  # the pace of the rollout, not a synchronisation
            restarted.append(replica)
            steps.append(
                Step(
                    address=replica.address,
                    was_leader=leader == replica.address,
                    leader_before=leader,
                    handover_ms=handover_ms,
                    exit_code=code,
                    exit_ms=(exited - stopping) * 1000,
                    ready_s=ready - exited,
                    gap_ms=max_gap(writer.acks, signalled, time.monotonic()) * 1000,
                    leader_after=leader_after,
                )
            )
    return steps


def run(*, quick: bool) -> dict[str, Any]:
    bench_run = BenchRun.start(quick=quick)
    rounds = QUICK_ROUNDS if quick else FULL_ROUNDS
    baseline_s = QUICK_BASELINE_S if quick else FULL_BASELINE_S
    with fresh_bed("rolling_restart") as (bed, version):
        replicas = [new_replica(bed) for _ in range(REPLICAS)]
        try:
            for replica in replicas:
                replica.start()
            wait_ready(replicas)
            seeds = [r.address for r in replicas]
            submit_topology(seeds, bed.workdir)
            writer = Writer(seeds)
            writer.start()
            base_start = time.monotonic()
            time.sleep(baseline_s)  # steady-state writes: the baseline being measured
            base_end = time.monotonic()
            steps = rolling_restart(replicas, writer, rounds)
            roll_end = time.monotonic()
            writer.stop()
        finally:
            stop_all(replicas, grace=EXIT_TIMEOUT_S)
    baseline_gap = max_gap(writer.acks, base_start, base_end)
    rolling_gap = max_gap(writer.acks, base_end, roll_end)
    in_roll = [t for t in writer.acks if base_end <= t <= roll_end]
    handovers = len(writer.epochs) - 1
    return {
        "benchmark": "rolling_restart",
        "quick": quick,
        "replicas": REPLICAS,
        "rounds": rounds,
        "restarts": len(steps),
        "handovers": handovers,
        "target_handovers": rounds * TARGET_HANDOVERS_PER_ROUND,
        "handover_calls": sum(s.handover_ms is not None for s in steps),
        "leader_restarts": sum(s.was_leader for s in steps),
        "follower_restarts_moving_leader": sum(
            not s.was_leader and s.leader_after != s.leader_before for s in steps
        ),
        "graceful_exits": sum(s.exit_code == 0 for s in steps),
        "session_timeout_s": SESSION_TIMEOUT_S,
        "zookeeper_version": version,
        "longest_write_gap_s": round(rolling_gap, 4),
        "baseline_max_gap_s": round(baseline_gap, 4),
        "gap_over_baseline": round(rolling_gap / baseline_gap, 2) if baseline_gap else None,
        "target_gap_s": TARGET_GAP_S,
        "on_target": rolling_gap <= TARGET_GAP_S
        and handovers == rounds * TARGET_HANDOVERS_PER_ROUND
        and not writer.failures,
        "leader_restart_gap_ms": [round(s.gap_ms, 1) for s in steps if s.was_leader],
        "follower_restart_gap_ms": [round(s.gap_ms, 1) for s in steps if not s.was_leader],
        "writes": len(writer.acks),
        "writes_during_restarts": len(in_roll),
        "writes_per_s_during_restarts": round(len(in_roll) / (roll_end - base_end), 1),
        "failed_writes": len(writer.failures),
        "failures": writer.failures[:5],
        "write_p50_ms": round(percentile(writer.latencies_ms, 50), 2),
        "write_p99_ms": round(percentile(writer.latencies_ms, 99), 2),
        "write_max_ms": round(max(writer.latencies_ms), 2),
        "epochs_seen": sorted(writer.epochs),
        "steps": [
            {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(s).items()}
            for s in steps
        ],
        "machine": machine_facts().as_dict(),
        "load_1min_start": round(bench_run.load_start, 2),
        "load_1min_end": round(load_1min(), 2),
        "wall_s": round(time.monotonic() - bench_run.began, 1),
    }


def show(result: dict[str, Any]) -> None:
    print(
        f"rolling restart ({'quick' if result['quick'] else 'full'}): {result['replicas']} "
        f"`nimbus serve` replicas, standalone ZooKeeper {result['zookeeper_version']}, session "
        f"{result['session_timeout_s']:g} s; each replica SIGTERMed, restarted and ready in turn, "
        f"{result['rounds']} round(s), followers first, the leader last after `handover --to` "
        "a replica restarted in the round; a writer alternates deactivate/activate (one "
        "fenced write each) through NimbusClient"
    )
    print()
    rows = [
        [
            i + 1, s["address"], "leader" if s["was_leader"] else "follower",
            "" if s["handover_ms"] is None else round(s["handover_ms"], 1), s["exit_code"],
            round(s["exit_ms"], 1), round(s["ready_s"], 2), round(s["gap_ms"], 1),
            s["leader_after"],
        ]
        for i, s in enumerate(result["steps"])
    ]  # fmt: skip
    print_table(
        ["#", "replica", "role", "handover ms", "exit", "exit ms", "ready s",
         "longest write gap ms", "leader after"],
        rows,
    )  # fmt: skip
    print()
    print_table(
        ["figure", "value"],
        [
            ["leader changes the writer saw (handovers)",
             f"{result['handovers']} (target {result['target_handovers']})"],
            ["handover calls made", result["handover_calls"]],
            ["follower restarts that moved the leader", result["follower_restarts_moving_leader"]],
            ["longest write gap during restarts (s)", result["longest_write_gap_s"]],
            ["longest write gap before restarts, baseline (s)", result["baseline_max_gap_s"]],
            ["ratio to baseline", result["gap_over_baseline"]],
            ["target (s)", result["target_gap_s"]],
            ["writes acknowledged during restarts", result["writes_during_restarts"]],
            ["writes/s during restarts", result["writes_per_s_during_restarts"]],
            ["failed writes (client gave up)", result["failed_writes"]],
            ["write latency p50 / p99 / max (ms)",
             f"{result['write_p50_ms']} / {result['write_p99_ms']} / {result['write_max_ms']}"],
            ["graceful exits (code 0)", f"{result['graceful_exits']} of {result['restarts']}"],
            ["leader epochs seen by the writer", " ".join(map(str, result["epochs_seen"]))],
        ],
    )  # fmt: skip
    print()
    print(
        f"machine: {machine_facts().line().removeprefix('machine: ')}\nload average (1 min) "
        f"{result['load_1min_start']} at start, {result['load_1min_end']} at end; wall time "
        f"{result['wall_s']} s"
    )


def main(argv: list[str] | None = None) -> int:
    quick_help = f"{QUICK_ROUNDS} round of restarts instead of {FULL_ROUNDS} (about a minute)"
    args = bench_parser(__doc__, quick_help).parse_args(argv)
    exit_on_sigterm()
    result = run(quick=args.quick)
    show(result)
    print_json(result)
    summary = {
        k: result[k] for k in ("rounds", "handovers", "longest_write_gap_s", "failed_writes")
    }
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
