"""What failover and memory cost with 10 and with 10,000 active topologies.

For each N (10 and 10,000; ``--quick``: 10 and 2,000) under a fresh root
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
* failover, ``FULL_TRIALS`` times (``--quick``: ``QUICK_TRIALS``): SIGTERM the leader and,
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

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import _replicas
import grpc
from _common import (
    BenchError,
    cpu_seconds,
    exit_on_sigterm,
    free_port,
    load_1min,
    machine_facts,
    percentile,
    print_table,
    vm_rss_mib,
)
from _replicas import serve_command, stop_all, tails, zookeeper_version
from kazoo.client import KazooClient

from cluster.api import pb, records
from code_sync.package import make_package
from devtools.zkserver import ZooKeeperCluster

SMALL_N = 10
FULL_LARGE_N = 10_000
QUICK_LARGE_N = 2_000
FULL_TRIALS = 5
QUICK_TRIALS = 3
TARGET_RATIO = 1.5

REPLICAS = 2
SESSION_TIMEOUT_S = 4.0
SYNC_INTERVAL_S = 1.0
ZK_MAX_SESSION_MS = 60_000
SEED_TXN_OPS = 500  # operations per seeding multi-op (two per topology)
SEED_TIMEOUT_S = 120.0

POLL_INTERVAL_S = 0.001  # between two rounds of (GetLeaderAddress, write) during failover
RPC_TIMEOUT_S = 1.0
READY_TIMEOUT_S = 600.0  # a replica registers as holder of every topology before queueing
READY_POLL_S = 0.05
FAILOVER_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0
SETTLE_S = 2.0  # after ready, before RSS or a trial: first scheduler and sync passes done
STEADY_AFTER_S = 40.0  # after ready: start-up work long done, a periodic full sync pass due
STEADY_WINDOW_S = 20.0  # CPU measured over this long in the steady state

QUEUED = "queued for leadership"
WRITE_TOPOLOGY = 0  # index of the topology every trial's write changes
RETRYABLE = frozenset(
    {
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)
TOPOLOGY_SOURCE = b'"""Scale benchmark topology: never run."""\n'

# "2026-11-22 10:00:00,123 INFO leader.elector: <message>" (nimbus serve's log format)
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.]+): (.*)$")
# Steps of the new leader, as logged by leader.elector and nimbus.daemon.
STEPS = (
    ("won the lock", re.compile(r": won the lock \(")),
    ("took office", re.compile(r": took office, epoch \d+")),
    ("leading", re.compile(r"^leading with epoch \d+")),
)


def topology_name(i: int) -> str:
    return f"scale-{i:05d}"


def topology_id(name: str) -> str:
    return f"{name}-1-1"


# -- the ZooKeeper layout (cluster.paths, imported by name) ------------------------------


class _Paths(Protocol):
    def storm(self, topology_id: str) -> str: ...

    def name(self, name: str) -> str: ...

    def folders(self) -> list[str]: ...


def zk_paths(root: str) -> _Paths:
    """``cluster.paths.Paths(root)``; see the note on imports at the top."""
    module = importlib.import_module("cluster.paths")
    paths: _Paths = module.Paths(root)
    return paths


# -- the package and the seed -----------------------------------------------------------


@dataclass(frozen=True)
class Package:
    path: Path
    digest: str
    size: int


def build_package(dest: Path) -> Package:
    make_package({"topology.py": TOPOLOGY_SOURCE}, dest)
    data = dest.read_bytes()
    return Package(dest, hashlib.sha256(data).hexdigest(), len(data))


def place_package(package: Package, code_dir: Path) -> None:
    """``<code-dir>/<digest>``, read-only like the store's own files."""
    code_dir.mkdir(parents=True, exist_ok=True)
    target = code_dir / package.digest
    if target.exists():
        return
    shutil.copyfile(package.path, target)
    os.chmod(target, 0o444)


def seed(connect: str, root: str, n: int, package: Package) -> float:
    """Folders, N StormBase records and N name nodes; returns the seconds it took."""
    began = time.perf_counter()
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30.0)
    try:
        paths = zk_paths(root)
        for folder in paths.folders():
            client.ensure_path(folder)
        launched = int(time.time() * 1000)
        pending: list[Any] = []
        txn = client.transaction()
        ops = 0
        for i in range(n):
            name = topology_name(i)
            tid = topology_id(name)
            base = records.StormBase(
                name=name,
                status=records.ACTIVE,
                digest=package.digest,
                num_workers=1,
                epoch=1,
                launch_time_ms=launched,
                config_json="{}",
                package_size=package.size,
            )
            txn.create(paths.storm(tid), base.SerializeToString(deterministic=True))
            txn.create(paths.name(name), tid.encode())
            ops += 2
            if ops >= SEED_TXN_OPS:
                pending.append(txn.commit_async())
                txn, ops = client.transaction(), 0
        if ops:
            pending.append(txn.commit_async())
        for result in pending:
            outcome = result.get(timeout=SEED_TIMEOUT_S)
            failed = [r for r in outcome if isinstance(r, Exception)]
            if failed:
                raise BenchError(f"seeding {root} failed: {failed[0]!r}")
        stored = len(client.get_children(f"{root}/storms"))
        if stored != n:
            raise BenchError(f"seeded {n} topologies under {root}, found {stored}")
    finally:
        client.stop()
        client.close()
    return time.perf_counter() - began


# -- replicas as processes --------------------------------------------------------------


@dataclass
class Replica(_replicas.Replica):
    code_dir: Path

    def queued(self) -> bool:
        """Whether the current process logged that it queued (its code gate passed)."""
        return QUEUED in self.log_since(self.log_offset)


@dataclass
class Cluster:
    zookeeper: str
    root: str
    workdir: Path
    replicas: list[Replica] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add_replica(self, package: Package) -> Replica:
        port = free_port()
        replica = Replica(
            port,
            self.workdir / f"replica-{port}.log",
            rpc_timeout=RPC_TIMEOUT_S,
            code_dir=self.workdir / f"code-{port}",
        )
        place_package(package, replica.code_dir)
        self.replicas.append(replica)
        return replica

    def launch(self, replica: Replica) -> None:
        extra = (
            "--replicas", str(REPLICAS), "--min-replicas", "1",
            "--sync-interval", f"{SYNC_INTERVAL_S:g}",
        )  # fmt: skip
        replica.launch(
            serve_command(
                zookeeper=self.zookeeper,
                root=self.root,
                listen=replica.address,
                session_timeout=SESSION_TIMEOUT_S,
                code_dir=replica.code_dir,
                extra=extra,
            )
        )

    def other(self, replica: Replica) -> Replica:
        return next(r for r in self.replicas if r is not replica)

    def by_address(self, address: str) -> Replica:
        for replica in self.replicas:
            if replica.address == address:
                return replica
        raise BenchError(f"{address} is not one of the bench's replicas")

    def wait_ready(self) -> tuple[Replica, int]:
        """Until both replicas list both, name one leader and have queued; (leader, epoch)."""
        expected = frozenset(r.address for r in self.replicas)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for replica in self.replicas:
                if not replica.alive():
                    raise BenchError(
                        f"replica {replica.address} exited with {replica.returncode}\n"
                        f"{replica.log_tail()}"
                    )
            if (
                all(r.listening() for r in self.replicas)
                and all(r.queued() for r in self.replicas)
                and all(r.registered() == expected for r in self.replicas)
            ):
                named = {r.leader() for r in self.replicas}
                if len(named) == 1:
                    (leader,) = named
                    if leader is not None and leader[0] in expected:
                        return self.by_address(leader[0]), leader[1]
            time.sleep(READY_POLL_S)
        raise BenchError(f"the replicas were not ready in {READY_TIMEOUT_S:.0f} s\n{self.tails()}")

    def tails(self) -> str:
        return tails(self.replicas)

    def shutdown(self) -> None:
        stop_all(self.replicas, grace=15.0)


# -- failover ---------------------------------------------------------------------------


def _log_time(stamp: str) -> float:
    """A log line's asctime (local wall clock, ms) as a Unix time."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def steps_from_log(text: str, since_wall: float) -> dict[str, float]:
    """Seconds from ``since_wall`` to the first line of each of ``STEPS`` in ``text``."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        parsed = _parse_log_line(line)
        if parsed is None:
            continue
        stamp, message = parsed
        for step, pattern in STEPS:
            if step not in found and pattern.search(message):
                found[step] = _log_time(stamp) - since_wall
    return found


def _parse_log_line(line: str) -> tuple[str, str] | None:
    """(asctime, message) of a text or JSON (``--log-format json``) log line."""
    if line.startswith("{"):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return None
        if isinstance(event, dict) and "time" in event and "message" in event:
            return str(event["time"]), str(event["message"])
        return None
    match = _LOG_LINE.match(line)
    return (match.group(1), match.group(4)) if match else None


@dataclass(frozen=True)
class Trial:
    answered_s: float  # signal -> GetLeaderAddress on the survivor names it, higher epoch
    wrote_s: float  # signal -> a write through the survivor returned OK
    write_attempts: int
    old_epoch: int
    new_epoch: int
    action: str
    steps: dict[str, float]  # from the new leader's log, seconds after the signal
    exit_code: int | None
    restart_ready_s: float  # restart of the stopped replica -> both ready again


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
class SizeResult:
    n: int
    root: str
    seed_s: float
    first_ready_s: float  # both replicas launched -> ready (cache loaded, registered, queued)
    leader_rss_mib: float | None
    follower_rss_mib: float | None
    leader_rss_after_mib: float | None  # the leader at the end, after all the failovers
    leader_idle_cpu: float | None  # CPU seconds per second over SETTLE_S after ready
    follower_idle_cpu: float | None
    leader_steady_cpu: float | None  # the same from STEADY_AFTER_S, over STEADY_WINDOW_S
    follower_steady_cpu: float | None
    trials: list[Trial]

    def p50_ms(self, pick: str) -> float:
        return percentile([getattr(t, pick) * 1000 for t in self.trials], 50)

    def max_ms(self, pick: str) -> float:
        return float(max(getattr(t, pick) * 1000 for t in self.trials))

    def step_p50_ms(self, step: str) -> float | None:
        got = [t.steps[step] * 1000 for t in self.trials if step in t.steps]
        return percentile(got, 50) if got else None

    def leading_to_write_ms(self) -> list[float]:
        """Per trial: from "leading with epoch" (writes accepted) to the write's OK."""
        return [
            (t.wrote_s - t.steps["leading"]) * 1000 for t in self.trials if "leading" in t.steps
        ]


def measure_size(
    zookeeper: str,
    workdir: Path,
    package: Package,
    n: int,
    *,
    trials: int,
    poll_s: float,
    keep_logs: Path | None,
) -> tuple[SizeResult, list[str]]:
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
        leader_cpu, follower_cpu = cpu_share((leader.pid, follower.pid), SETTLE_S)
        leader_rss = vm_rss_mib(leader.pid)
        follower_rss = vm_rss_mib(follower.pid)
        # Steady state: what an idle cluster of this size costs, start-up work long done.
        time.sleep(max(0.0, began + first_ready_s + STEADY_AFTER_S - time.monotonic()))
        leader_steady, follower_steady = cpu_share((leader.pid, follower.pid), STEADY_WINDOW_S)
        print(
            f"N={n}: both replicas ready in {first_ready_s:.2f} s; leader {leader.address} "
            f"(epoch {epoch}) RSS {leader_rss or 0:.1f} MiB, follower "
            f"{follower_rss or 0:.1f} MiB; idle CPU leader {100 * (leader_cpu or 0):.0f}%, "
            f"follower {100 * (follower_cpu or 0):.0f}% of a core; steady "
            f"{100 * (leader_steady or 0):.1f}% / {100 * (follower_steady or 0):.1f}%",
            file=sys.stderr,
            flush=True,
        )
        done: list[Trial] = []
        for i in range(trials):
            trial = failover_trial(cluster, i, poll_s)
            done.append(trial)
            steps = ", ".join(f"{k} {v * 1000:.0f}" for k, v in trial.steps.items())
            print(
                f"  N={n} trial {i + 1}/{trials}: leader answers {trial.answered_s * 1000:7.1f} ms,"
                f" {trial.action} OK {trial.wrote_s * 1000:7.1f} ms ({trial.write_attempts} "
                f"attempts), epoch {trial.old_epoch} -> {trial.new_epoch}; log: {steps} ms; "
                f"restart ready in {trial.restart_ready_s:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        leader, _ = cluster.wait_ready()
        leader_rss_after = vm_rss_mib(leader.pid)
    except BaseException:
        print(f"bench/scale.py: replica logs (N={n}):\n{cluster.tails()}", file=sys.stderr)
        raise
    finally:
        cluster.shutdown()
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for replica in cluster.replicas:
                with contextlib.suppress(OSError):
                    shutil.copy(replica.log_path, keep_logs / f"n{n}-{replica.log_path.name}")
    return SizeResult(
        n=n,
        root=root,
        seed_s=seed_s,
        first_ready_s=first_ready_s,
        leader_rss_mib=leader_rss,
        follower_rss_mib=follower_rss,
        leader_rss_after_mib=leader_rss_after,
        leader_idle_cpu=leader_cpu,
        follower_idle_cpu=follower_cpu,
        leader_steady_cpu=leader_steady,
        follower_steady_cpu=follower_steady,
        trials=done,
    ), cluster.notes


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


# -- report -------------------------------------------------------------------------------


def _pct(fraction: float | None) -> str:
    return _cell(None if fraction is None else 100 * fraction, ".1f")


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _cell(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def report(
    results: list[SizeResult],
    *,
    trials: int,
    quick: bool,
    poll_s: float,
    zk_version: str,
    notes: list[str],
    load_start: float,
    elapsed_s: float,
) -> dict[str, Any]:
    facts = machine_facts()
    mode = "quick" if quick else "full"
    small, large = results[0], results[-1]
    print(
        f"failover and memory by number of active topologies ({mode}): {REPLICAS} `nimbus serve` "
        f"replicas, standalone ZooKeeper {zk_version} on loopback, session timeout "
        f"{SESSION_TIMEOUT_S:g} s, sync interval {SYNC_INTERVAL_S:g} s; every topology ACTIVE, "
        "sharing one package already in both code dirs; no supervisors"
    )
    print(
        f"{trials} graceful failovers per N: SIGTERM the leader, then poll the other replica "
        f"every {poll_s * 1000:g} ms: 'leader answers' = its GetLeaderAddress names "
        "itself with a higher epoch; 'first write' = Deactivate/ActivateTopology through it "
        "returned OK. Steps from the new leader's log (ms after the signal, p50): 'won "
        "lock', 'took office' (code gate after winning + take-office multi-op), 'leading' "
        "(writes accepted from here); 'leading -> write': from there to the write's OK."
    )
    print()
    rows: list[list[object]] = []
    for s in results:
        rows.append(
            [
                f"{s.n:,}",
                f"{s.p50_ms('answered_s'):.1f}",
                f"{s.p50_ms('wrote_s'):.1f}",
                f"{s.max_ms('wrote_s'):.1f}",
                _cell(s.step_p50_ms("won the lock")),
                _cell(s.step_p50_ms("took office")),
                _cell(s.step_p50_ms("leading")),
                _cell(percentile(s.leading_to_write_ms(), 50) if s.leading_to_write_ms() else None),
            ]
        )
    print_table(
        ["topologies", "leader answers p50 ms", "first write p50 ms", "first write max ms",
         "won lock", "took office", "leading", "leading -> write"],
        rows,
    )  # fmt: skip
    print()
    mrows: list[list[object]] = []
    for s in results:
        mrows.append(
            [
                f"{s.n:,}",
                _cell(s.leader_rss_mib),
                _cell(s.follower_rss_mib),
                _cell(s.leader_rss_after_mib),
                _cell(None if s.leader_idle_cpu is None else 100 * s.leader_idle_cpu, ".0f"),
                _cell(None if s.follower_idle_cpu is None else 100 * s.follower_idle_cpu, ".0f"),
                _pct(s.leader_steady_cpu),
                _pct(s.follower_steady_cpu),
                f"{s.seed_s:.2f}",
                f"{s.first_ready_s:.2f}",
                f"{percentile([t.restart_ready_s for t in s.trials], 50):.2f}",
            ]
        )
    print_table(
        ["topologies", "leader RSS MiB", "follower RSS MiB", "leader RSS at end MiB",
         "leader idle CPU %", "follower idle CPU %", "leader steady CPU %",
         "follower steady CPU %", "seed s", "both ready s",
         "restart ready p50 s"],
        mrows,
    )  # fmt: skip
    print(
        "RSS: VmRSS once ready (record cache loaded, both queued) plus "
        f"{SETTLE_S:g} s; 'at end': the leader after all the failovers. Idle CPU: percent of "
        f"one core over those {SETTLE_S:g} s (no calls, no changes); 'steady': the same over "
        f"{STEADY_WINDOW_S:g} s from {STEADY_AFTER_S:g} s after ready. 'ready': the replica "
        "lists both, they agree on the leader, and it logged 'queued for leadership'."
    )
    ratio = large.p50_ms("wrote_s") / small.p50_ms("wrote_s")
    answered_ratio = large.p50_ms("answered_s") / small.p50_ms("answered_s")
    verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
    print()
    print(
        f"first write p50, {large.n:,} / {small.n:,} topologies = {ratio:.2f}x: {verdict} the "
        f"target <= {TARGET_RATIO}x (leader answers: {answered_ratio:.2f}x)"
    )
    for note in notes:
        print(f"note: {note}")
    print()
    load_end = load_1min()
    print(facts.line())
    print(
        f"load average (1 min) {load_start:.2f} at start, {load_end:.2f} at end; wall time "
        f"{elapsed_s:.1f} s including ZooKeeper and replica startup"
    )

    result: dict[str, Any] = {
        "benchmark": "scale",
        "quick": quick,
        "topologies": [s.n for s in results],
        "trials": trials,
        "poll_interval_ms": poll_s * 1000,
        "replicas": REPLICAS,
        "session_timeout_s": SESSION_TIMEOUT_S,
        "zookeeper_version": zk_version,
        # the large N is reported under the 10000 name in quick mode too ("topologies")
        "failover_10_ms": round(small.p50_ms("wrote_s"), 2),
        "failover_10000_ms": round(large.p50_ms("wrote_s"), 2),
        "failover_ratio": round(ratio, 3),
        "target_failover_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        "leader_elected_10_ms": round(small.p50_ms("answered_s"), 2),
        "leader_elected_10000_ms": round(large.p50_ms("answered_s"), 2),
        "leader_elected_ratio": round(answered_ratio, 3),
        "notes": notes,
        "machine": facts.as_dict(),
        "load_1min_start": round(load_start, 2),
        "load_1min_end": round(load_end, 2),
        "wall_s": round(elapsed_s, 2),
    }
    for s in results:
        result[f"replica_rss_mib_{s.n}"] = _r(s.leader_rss_mib, 1)
        result[f"follower_rss_mib_{s.n}"] = _r(s.follower_rss_mib, 1)
        result[f"leader_rss_at_end_mib_{s.n}"] = _r(s.leader_rss_after_mib, 1)
        result[f"leader_idle_cpu_pct_{s.n}"] = _r(
            None if s.leader_idle_cpu is None else 100 * s.leader_idle_cpu, 1
        )
        result[f"follower_idle_cpu_pct_{s.n}"] = _r(
            None if s.follower_idle_cpu is None else 100 * s.follower_idle_cpu, 1
        )
        for role, cpu in (("leader", s.leader_steady_cpu), ("follower", s.follower_steady_cpu)):
            result[f"{role}_steady_cpu_pct_{s.n}"] = _r(None if cpu is None else 100 * cpu, 2)
        result[f"by_n_{s.n}"] = {
            "root": s.root,
            "seed_s": round(s.seed_s, 3),
            "first_ready_s": round(s.first_ready_s, 3),
            "failover_ms": [round(t.wrote_s * 1000, 2) for t in s.trials],
            "leader_elected_ms": [round(t.answered_s * 1000, 2) for t in s.trials],
            "failover_max_ms": round(s.max_ms("wrote_s"), 2),
            "write_attempts": [t.write_attempts for t in s.trials],
            "steps_ms": [{k: round(v * 1000, 1) for k, v in t.steps.items()} for t in s.trials],
            "leading_to_write_ms": [round(ms, 1) for ms in s.leading_to_write_ms()],
            "restart_ready_s": [round(t.restart_ready_s, 3) for t in s.trials],
            "epochs": [[t.old_epoch, t.new_epoch] for t in s.trials],
        }
    return result


def run(*, quick: bool, poll_s: float, keep_logs: Path | None) -> dict[str, Any]:
    began = time.monotonic()
    load_start = load_1min()
    sizes = (SMALL_N, QUICK_LARGE_N if quick else FULL_LARGE_N)
    trials = QUICK_TRIALS if quick else FULL_TRIALS
    workdir = Path(tempfile.mkdtemp(prefix="nimbus-bench-scale-"))
    results: list[SizeResult] = []
    notes: list[str] = []
    try:
        package = build_package(workdir / "package.zip")
        with ZooKeeperCluster(size=1, max_session_timeout_ms=ZK_MAX_SESSION_MS) as zk:
            zk_version = zookeeper_version(zk.client_ports[0])
            for n in sizes:
                result, size_notes = measure_size(
                    zk.connect_string,
                    workdir,
                    package,
                    n,
                    trials=trials,
                    poll_s=poll_s,
                    keep_logs=keep_logs,
                )
                results.append(result)
                notes.extend(f"N={n}: {note}" for note in size_notes)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return report(
        results,
        trials=trials,
        quick=quick,
        poll_s=poll_s,
        zk_version=zk_version,
        notes=notes,
        load_start=load_start,
        elapsed_s=time.monotonic() - began,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=(
            f"{SMALL_N} and {QUICK_LARGE_N:,} topologies, {QUICK_TRIALS} failovers each, "
            f"instead of {SMALL_N} and {FULL_LARGE_N:,}, {FULL_TRIALS} each (a few minutes)"
        ),
    )
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
    result = run(quick=args.quick, poll_s=args.poll_ms / 1000, keep_logs=args.keep_logs)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
