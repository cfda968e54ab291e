"""What failover and memory cost with 10 and with 10,000 active topologies.

For each N (10 and 10,000, ``--quick`` too) under a fresh root
``/scale-<N>-<uuid>`` on one standalone ZooKeeper:

* seeds the metadata directly with a plain kazoo client (a benchmark is exempt from the
  fenced-writer rule): the folders of ``cluster.paths.Paths(root).folders()``, and N
  topologies ``/storms/<name>-1-1`` = StormBase(name, ACTIVE, digest D, 1 worker, epoch 1)
  with ``/names/<name>`` = the id, in pipelined multi-ops of ``SEED_TXN_OPS`` operations.
  All N share one small package (``make_package``) of SHA-256 digest D, put read-only into
  each replica's code dir as ``<code-dir>/<D>`` before the replica starts, so no code has
  to travel and the code gate only has to *check* N topologies;
* starts two ``nimbus serve`` replicas (``--replicas 2 --min-replicas 1``) and waits until
  both list both, agree on the leader, and both logged "queued for leadership" (the
  follower's code gate passed);
* memory: the leader's VmRSS once its record cache has loaded (``SETTLE_S`` after ready,
  so its first scheduler and code-sync passes have run), and the follower's; also the CPU
  each replica used in those idle seconds (no calls, nothing changing), and again in the
  steady state (``STEADY_WINDOW_S`` from ``STEADY_AFTER_S`` after ready: start-up work
  done, a periodic full code-sync pass inside the window);
* failover, ``FULL_TRIALS`` times (``--quick``: ``QUICK_TRIALS``), the trials of the two N
  interleaved in a random order each round while both clusters run: SIGTERM the leader and,
  polling the other replica every ``POLL_INTERVAL_S`` with both calls in turn, time from
  the signal until (a) its ``GetLeaderAddress`` names itself with a higher epoch and
  (b) it has *served a write*: ``DeactivateTopology`` (then ``ActivateTopology`` on the
  next trial, so every trial's write changes the record) of one topology returns OK,
  retried on FAILED_PRECONDITION / UNAVAILABLE / DEADLINE_EXCEEDED. Each trial starts
  ``SETTLE_S`` plus a random fraction of the sync interval after the cluster is ready (a
  follower in its steady state, the signal at a random phase of the replicas' periodic
  passes: a fixed delay would always hit the same point of them). The stopped replica
  is then restarted (same port, same code dir) and the next trial waits until it is
  queued again. The new leader's log (timestamps) gives the steps in between: "won the
  lock", "took office" (the code gate after winning plus the take-office multi-op) and
  "leading with epoch" (the duties start; writes are accepted from here).

``failover_ratio`` is the p50 time-to-write at the large N over that at N=10 (the target
is at most ``TARGET_RATIO``).

Run from the repo root: ``python bench/scale.py [--quick] [--poll-ms MS] [--keep-logs DIR]``.
Progress goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from _common import (
    BenchError,
    BenchRun,
    bench_parser,
    cpu_seconds,
    exit_on_sigterm,
    print_json,
    vm_rss_mib,
)
from _replicas import zookeeper_version
from _scale_cluster import (
    REPLICAS,
    RPC_TIMEOUT_S,
    SYNC_INTERVAL_S,
    Cluster,
    Package,
    Replica,
    build_package,
    seed,
    steps_from_log,
    topology_name,
)
from _scale_figures import (
    SETTLE_S,
    STEADY_AFTER_S,
    STEADY_WINDOW_S,
    SizeResult,
    Trial,
    report,
)

from cluster.api import pb, records
from devtools.zkserver import ZooKeeperCluster

SMALL_N = 10
LARGE_N = 10_000
FULL_TRIALS = 7
QUICK_TRIALS = 3

ZK_MAX_SESSION_MS = 60_000

POLL_INTERVAL_S = 0.001  # between two rounds of (GetLeaderAddress, write) during failover
FAILOVER_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0

WRITE_TOPOLOGY = 0  # index of the topology every trial's write changes
RETRYABLE = frozenset(
    {
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)

# -- failover ---------------------------------------------------------------------------


def write_call(replica: Replica, activate: bool, name: str) -> pb.TopologyActionResponse:
    request = pb.TopologyNameRequest(name=name)
    stub = replica.stub()
    if activate:
        reply: pb.TopologyActionResponse = stub.ActivateTopology(request, timeout=RPC_TIMEOUT_S)
    else:
        reply = stub.DeactivateTopology(request, timeout=RPC_TIMEOUT_S)
    return reply


def failover_trial(cluster: Cluster, index: int, poll_s: float) -> Trial:
    old, old_epoch = cluster.wait_ready()
    # A follower in its steady state, not one finishing its start; the random part puts the
    # signal at a random phase of the replicas' once-a-second passes (code sync, duties),
    # as a real failure would be, instead of always at the same point after a restart.
    time.sleep(SETTLE_S + random.uniform(0.0, SYNC_INTERVAL_S))
    survivor = cluster.other(old)
    activate = index % 2 == 1  # trial 0 deactivates, trial 1 activates, ...
    action = "ActivateTopology" if activate else "DeactivateTopology"
    expected = records.ACTIVE if activate else records.INACTIVE
    name = topology_name(WRITE_TOPOLOGY)
    log_from = survivor.log_size()
    answered: float | None = None
    wrote: float | None = None
    new_epoch = 0
    attempts = 0
    wall0 = time.time()
    began = time.perf_counter()
    os.kill(old.pid, signal.SIGTERM)
    while answered is None or wrote is None:
        if answered is None:
            named = survivor.leader()
            if named is not None and named[0] == survivor.address and named[1] > old_epoch:
                answered = time.perf_counter() - began
        if wrote is None:
            attempts += 1
            try:
                reply = write_call(survivor, activate, name)
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE:
                    raise BenchError(
                        f"{action} on {survivor.address}: {e.code()} {e.details()}"
                    ) from e
            else:
                wrote = time.perf_counter() - began
                if reply.status != expected or reply.epoch <= old_epoch:
                    raise BenchError(
                        f"{action} returned status {reply.status}, epoch {reply.epoch} "
                        f"(expected status {expected}, epoch above {old_epoch})"
                    )
                new_epoch = reply.epoch
        if time.perf_counter() - began > FAILOVER_TIMEOUT_S:
            raise BenchError(
                f"no write through {survivor.address} {FAILOVER_TIMEOUT_S:.0f} s after "
                f"SIGTERM to {old.address}\n{cluster.tails()}"
            )
        time.sleep(poll_s)
    exit_code = old.wait_exit(EXIT_TIMEOUT_S)
    if exit_code is None:
        cluster.notes.append(f"{old.address} still running {EXIT_TIMEOUT_S:.0f} s after SIGTERM")
        exit_code = old.returncode
    if exit_code != 0:
        cluster.notes.append(f"{old.address} exited with {exit_code} after SIGTERM (expected 0)")
    time.sleep(0.2)  # let the new leader's log catch up with its first scheduler pass
    steps = steps_from_log(survivor.log_since(log_from), wall0)
    restarted = time.monotonic()
    cluster.launch(old)
    leader, _ = cluster.wait_ready()
    if leader is not survivor:
        cluster.notes.append(f"after the restart of {old.address}, {leader.address} led")
    return Trial(
        answered_s=answered,
        wrote_s=wrote,
        write_attempts=attempts,
        old_epoch=old_epoch,
        new_epoch=new_epoch,
        action=action,
        steps=steps,
        exit_code=exit_code,
        restart_ready_s=time.monotonic() - restarted,
    )


# -- one N --------------------------------------------------------------------------------


@dataclass
class SizeBed:
    """One N's cluster, up and measured idle, collecting its failover trials."""

    n: int
    root: str
    cluster: Cluster
    seed_s: float
    first_ready_s: float
    leader_rss: float | None
    follower_rss: float | None
    idle_cpu: tuple[float | None, float | None]
    steady_cpu: tuple[float | None, float | None]
    trials: list[Trial] = field(default_factory=list)


def start_size(zookeeper: str, workdir: Path, package: Package, n: int) -> SizeBed:
    """Seed N topologies, start the replicas, and measure memory and CPU idle and steady."""
    root = f"/scale-{n}-{uuid.uuid4().hex[:12]}"
    sizedir = workdir / f"n{n}"
    sizedir.mkdir()
    seed_s = seed(zookeeper, root, n, package)
    print(f"N={n}: seeded {root} in {seed_s:.2f} s", file=sys.stderr, flush=True)
    cluster = Cluster(zookeeper=zookeeper, root=root, workdir=sizedir)
    try:
        for _ in range(REPLICAS):
            cluster.add_replica(package)
        began = time.monotonic()
        for replica in cluster.replicas:
            cluster.launch(replica)
        leader, epoch = cluster.wait_ready()
        first_ready_s = time.monotonic() - began
        follower = cluster.other(leader)
        idle = cpu_share((leader.pid, follower.pid), SETTLE_S)
        leader_rss = vm_rss_mib(leader.pid)
        follower_rss = vm_rss_mib(follower.pid)
        # Steady state: what an idle cluster of this size costs, start-up work long done.
        time.sleep(max(0.0, began + first_ready_s + STEADY_AFTER_S - time.monotonic()))
        steady = cpu_share((leader.pid, follower.pid), STEADY_WINDOW_S)
    except BaseException:
        print(f"bench/scale.py: replica logs (N={n}):\n{cluster.tails()}", file=sys.stderr)
        cluster.shutdown()
        raise
    print(
        f"N={n}: both replicas ready in {first_ready_s:.2f} s; leader {leader.address} "
        f"(epoch {epoch}) RSS {leader_rss or 0:.1f} MiB, follower "
        f"{follower_rss or 0:.1f} MiB; idle CPU leader {100 * (idle[0] or 0):.0f}%, "
        f"follower {100 * (idle[1] or 0):.0f}% of a core; steady "
        f"{100 * (steady[0] or 0):.1f}% / {100 * (steady[1] or 0):.1f}%",
        file=sys.stderr,
        flush=True,
    )
    return SizeBed(n, root, cluster, seed_s, first_ready_s, leader_rss, follower_rss, idle, steady)


def trial_on(bed: SizeBed, poll_s: float, of: int) -> None:
    index = len(bed.trials)
    try:
        trial = failover_trial(bed.cluster, index, poll_s)
    except BaseException:
        print(f"bench/scale.py: replica logs (N={bed.n}):\n{bed.cluster.tails()}", file=sys.stderr)
        raise
    bed.trials.append(trial)
    steps = ", ".join(f"{k} {v * 1000:.0f}" for k, v in trial.steps.items())
    print(
        f"  N={bed.n} trial {index + 1}/{of}: leader answers {trial.answered_s * 1000:7.1f} ms,"
        f" {trial.action} OK {trial.wrote_s * 1000:7.1f} ms ({trial.write_attempts} "
        f"attempts), epoch {trial.old_epoch} -> {trial.new_epoch}; log: {steps} ms; "
        f"restart ready in {trial.restart_ready_s:.2f} s",
        file=sys.stderr,
        flush=True,
    )


def finish_size(bed: SizeBed, keep_logs: Path | None) -> SizeResult:
    """The leader's memory after all the failovers; the cluster stopped, logs kept."""
    try:
        leader, _ = bed.cluster.wait_ready()
        leader_rss_after = vm_rss_mib(leader.pid)
    finally:
        bed.cluster.shutdown()
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for replica in bed.cluster.replicas:
                with contextlib.suppress(OSError):
                    shutil.copy(replica.log_path, keep_logs / f"n{bed.n}-{replica.log_path.name}")
    return SizeResult(
        n=bed.n,
        root=bed.root,
        seed_s=bed.seed_s,
        first_ready_s=bed.first_ready_s,
        leader_rss_mib=bed.leader_rss,
        follower_rss_mib=bed.follower_rss,
        leader_rss_after_mib=leader_rss_after,
        leader_idle_cpu=bed.idle_cpu[0],
        follower_idle_cpu=bed.idle_cpu[1],
        leader_steady_cpu=bed.steady_cpu[0],
        follower_steady_cpu=bed.steady_cpu[1],
        trials=bed.trials,
    )


def cpu_share(pids: tuple[int, int], seconds: float) -> tuple[float | None, float | None]:
    """CPU seconds per second each process uses over the next ``seconds`` (None: gone)."""
    before = [cpu_seconds(pid) for pid in pids]
    time.sleep(seconds)
    after = [cpu_seconds(pid) for pid in pids]
    a, b = (
        None if x is None or y is None else (y - x) / seconds
        for x, y in zip(before, after, strict=True)
    )
    return a, b


def run(*, quick: bool, poll_s: float, keep_logs: Path | None) -> dict[str, Any]:
    bench_run = BenchRun.start(quick=quick)
    sizes = (SMALL_N, LARGE_N)
    trials = QUICK_TRIALS if quick else FULL_TRIALS
    workdir = Path(tempfile.mkdtemp(prefix="nimbus-bench-scale-"))
    results: list[SizeResult] = []
    notes: list[str] = []
    beds: list[SizeBed] = []
    try:
        package = build_package(workdir / "package.zip")
        with ZooKeeperCluster(size=1, max_session_timeout_ms=ZK_MAX_SESSION_MS) as zk:
            zk_version = zookeeper_version(zk.client_ports[0])
            for n in sizes:
                beds.append(start_size(zk.connect_string, workdir, package, n))
            # Trials interleaved across the sizes (in a random order each round), both
            # clusters up throughout, so noise of the machine hits every N alike.
            for _ in range(trials):
                for bed in random.sample(beds, len(beds)):
                    trial_on(bed, poll_s, trials)
            while beds:
                bed = beds.pop(0)
                results.append(finish_size(bed, keep_logs))
                notes.extend(f"N={bed.n}: {note}" for note in bed.cluster.notes)
    finally:
        for bed in beds:
            bed.cluster.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    return report(
        results,
        trials=trials,
        poll_s=poll_s,
        zk_version=zk_version,
        notes=notes,
        bench_run=bench_run,
    )


def main(argv: list[str] | None = None) -> int:
    quick_help = (
        f"{QUICK_TRIALS} failovers at each of {SMALL_N} and {LARGE_N:,} topologies instead "
        f"of {FULL_TRIALS}: the same measurement, fewer trials"
    )
    parser = bench_parser(__doc__, quick_help)
    parser.add_argument(
        "--poll-ms",
        type=float,
        default=POLL_INTERVAL_S * 1000,
        help=(
            "pause between two polling rounds during a failover, in ms "
            f"(default {POLL_INTERVAL_S * 1000:g})"
        ),
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        metavar="DIR",
        help="copy the replicas' logs into DIR before the temp dir is removed",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    print_json(run(quick=args.quick, poll_s=args.poll_ms / 1000, keep_logs=args.keep_logs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
