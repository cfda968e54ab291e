"""The fault matrix made by the kernel and signals, and what a CLI user saw through it.

Each trial: wait for a healthy cluster and for the workload to be acknowledged, inject
one fault on the leader, hold it, undo it (restarting a killed replica), and wait until
the cluster is healthy and acknowledging again. Per trial the report gives:

- **failover**: from the fault to the take-office multi-op of the new leader (the ctime
  ZooKeeper gave ``/epochs/<n>``); none when the leader stayed;
- **resumed**: from the fault to the first fenced write of the leader in office after it
  (the ctime of the first ``/requests`` record of its epoch after the fault), read as the
  trial ends: the leader prunes old request records;
- **unavailability**: the longest stretch without an acknowledged CLI change, from the
  last one before the fault to the first one after the fault was over (undone, and the
  leader in office writing again), as the users saw it;
- **failed calls**: CLI calls that ended in an error (their default deadline, 30 s,
  outlasts every failover here).

``FAULTS`` is the matrix the soak and the tests run. Beside it, selectable by name
(:func:`known`) but in no test's matrix: ``EXTRA_FAULTS``, faults that must not depose a
healthy leader (issue 41), and the slow-disk rows ``zk-slow-disk@D[+FAULT]``
(``tests.chaos.slow_disk``; they need ZooKeeper with fsync on: :class:`SyncedKernelCluster`).
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from cluster.api import records
from cluster.paths import Paths
from devtools.faultproxy import FaultProxy
from devtools.netns import Cut
from devtools.zkserver import ZooKeeperCluster
from tests.chaos import slow_disk
from tests.chaos.cli_workload import CliCall, CliWorkload
from tests.chaos.kernel_cluster import GRPC_PORT, ROOT, KernelCluster
from tests.chaos.probes import ProbeSubmit, scheduled
from tests.cluster import REPO
from tests.waiting import wait_until

Inject = Callable[[KernelCluster, int, float], None]  # (cluster, leader index, T)


@dataclass
class Trial:
    fault: str
    leader: int
    epoch_before: int
    start: float = 0.0
    healed: float = 0.0
    epoch_after: int = 0
    failover_s: float | None = None
    resumed_s: float | None = None
    unavailability_s: float | None = None
    over: float = 0.0  # wall time the fault was over: undone, and the leader writing again
    failed: list[CliCall] = field(default_factory=list)
    #: What the fault itself recorded (wall times, victims, probes' outcomes); JSON-ready.
    details: dict[str, Any] = field(default_factory=dict)
    #: Set when the fault could not be made as it says (e.g. the fsync stall slowed nothing).
    error: str = ""
    probes: list[ProbeSubmit] = field(default_factory=list, repr=False)

    @property
    def failovers(self) -> int:
        """New terms from the fault to the end of the trial (take-office adds one each)."""
        return max(0, self.epoch_after - self.epoch_before)


#: A fault that records what it did in the trial: (cluster, leader index, T, trial).
TrialInject = Callable[[KernelCluster, int, float, Trial], None]


def _signal(signum: int) -> Inject:
    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.kill(leader, signum)

    return run


def _pause(factor: float) -> Inject:
    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.signal(leader, signal.SIGSTOP)
        try:
            time.sleep(factor * T)  # holding the fault is the fault
        finally:
            cluster.signal(leader, signal.SIGCONT)

    return run


def _cut(what: Cut, factor: float) -> Inject:
    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.cut(leader, what)
        try:
            time.sleep(factor * T)  # holding the fault is the fault
        finally:
            cluster.heal(leader)

    return run


def _pause_seconds(seconds: float) -> Inject:
    """A pause of fixed length, whatever T: shorter than the silence window, it must not
    move leadership."""

    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.signal(leader, signal.SIGSTOP)
        try:
            time.sleep(seconds)  # holding the fault is the fault
        finally:
            cluster.signal(leader, signal.SIGCONT)

    return run


def _zookeeper_pause(seconds: float) -> Inject:
    """SIGSTOP of the ZooKeeper server itself: every beat stalls, none is silence."""

    def run(cluster: KernelCluster, leader: int, T: float) -> None:
        cluster.zk.pause(0)
        try:
            time.sleep(seconds)  # holding the fault is the fault
        finally:
            cluster.zk.resume(0)

    return run


def _false_positive(cluster: KernelCluster, leader: int, T: float) -> None:
    """The leader is alive, but its port answers the successor's probes with a TCP reset
    (as if nothing listened): the successor preempts a live leader, which must step down."""
    successor = cluster.successor()
    cluster.cut(leader, Cut.REFUSE_PEER, peer=successor)
    try:
        time.sleep(T / 2)  # holding the fault is the fault
    finally:
        cluster.heal(leader)


FAULTS: dict[str, Inject] = {
    "sigkill": _signal(signal.SIGKILL),
    "sigterm": _signal(signal.SIGTERM),
    "sigstop-2T": _pause(2.0),
    "sigstop-3T": _pause(3.0),
    "sigstop-1s": _pause_seconds(1.0),
    "zk-stop-1s": _zookeeper_pause(1.0),
    "zk-cut-both": _cut(Cut.ZOOKEEPER_BOTH, 3.0),
    "zk-cut-out": _cut(Cut.ZOOKEEPER_OUT, 3.0),
    "zk-cut-in": _cut(Cut.ZOOKEEPER_IN, 3.0),
    "isolated": _cut(Cut.ISOLATED, 3.0),
    "clients-cut": _cut(Cut.CLIENTS, 2.0),
    "blip": _cut(Cut.ISOLATED, 0.25),
    "false-positive": _false_positive,
}


# -- faults that must not depose a healthy leader (issue 41) -------------------------------

#: Where ``accept-close-proxy`` listens, inside the leader's namespace.
ACCEPT_CLOSE_PORT = 16627
#: Seconds between a ``resets-pause`` cycle's SIGCONT and the next cycle's reset.
RESETS_PAUSE_GAP_S = 2.0


def _others(cluster: KernelCluster, i: int) -> list[int]:
    return [r.index for r in cluster.replicas if r.index != i]


def reset_links(cluster: KernelCluster, i: int, *, grpc_only: bool = False) -> int:
    """RST every TCP connection between replica ``i`` and the other replicas, from its
    side (``ss -K`` in its namespace: the kernel aborts the socket and sends a reset);
    ``grpc_only``: only those to its gRPC port. Returns how many there were."""
    peers: list[str] = []
    for j in _others(cluster, i):
        peers += ["dst", cluster.net.hosts[j].address, "or"]
    expression = ["(", *peers[:-1], ")"]
    if grpc_only:
        expression = ["sport", "=", f":{GRPC_PORT}", "and", *expression]
    done = subprocess.run(
        [*cluster.net.hosts[i].prefix(), "ss", "-K", "-Htn", *expression],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ss -K in replica {i}'s namespace: {done.stderr.strip()}")
    return len(done.stdout.splitlines())


def probe_name(fault: str) -> str:
    """A topology name for a probe of ``fault``, unique in the run."""
    tag = "".join(c if c.isalnum() or c in "._-" else "-" for c in fault)
    return f"probe-{tag}-{time.time_ns() % 10**9}"


def _probe(cluster: KernelCluster, trial: Trial) -> None:
    """A submit of a fresh package, started now; its outcome is read as the trial ends."""
    trial.probes.append(
        ProbeSubmit(cluster.seeds, cluster.workdir, probe_name(trial.fault)).start()
    )


def _port_refuse(factor: float) -> TrialInject:
    """The leader's gRPC port answers every other replica with a TCP reset (iptables REJECT
    --reject-with tcp-reset, a rule per replica), for ``factor`` T; their connections to it
    are reset at once, as the rule would at their next segment (a held idle link sends
    none). Clients and ZooKeeper still reach it: a live leader, a false "dead"."""

    def run(cluster: KernelCluster, leader: int, T: float, trial: Trial) -> None:
        try:
            for peer in _others(cluster, leader):
                cluster.cut(leader, Cut.REFUSE_PEER, peer=peer)
            trial.details["connections_reset"] = reset_links(cluster, leader, grpc_only=True)
            _probe(cluster, trial)
            time.sleep(factor * T)  # holding the fault is the fault
        finally:
            cluster.heal(leader)

    return run


def _accept_close_proxy(factor: float) -> TrialInject:
    """Every other replica's connection to the leader's gRPC port is redirected (iptables
    nat REDIRECT in the leader's namespace) to a server that accepts and closes at once
    (``devtools.acceptclose``), for ``factor`` T: as a proxy in front of a live leader
    whose backend does not answer. Their connections opened before are reset."""

    def run(cluster: KernelCluster, leader: int, T: float, trial: Trial) -> None:
        host = cluster.net.hosts[leader]
        server = subprocess.Popen(
            [*host.prefix(), sys.executable, "-m", "devtools.acceptclose",
             "--port", str(ACCEPT_CLOSE_PORT)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            said = server.stdout.readline()
            if not said.startswith("listening"):
                raise RuntimeError(f"the accept-and-close server did not start: {said!r}")
            for peer in _others(cluster, leader):
                source = cluster.net.hosts[peer].address
                to_grpc = ("-s", source, "-p", "tcp", "--dport", str(GRPC_PORT))
                host.iptables("-t", "nat", "-A", "PREROUTING", *to_grpc,
                              "-j", "REDIRECT", "--to-ports", str(ACCEPT_CLOSE_PORT))  # fmt: skip
                # Connections opened before the redirect keep the real port: reset them.
                host.iptables("-A", "INPUT", *to_grpc, "-j", "REJECT", "--reject-with",
                              "tcp-reset")  # fmt: skip
            trial.details["connections_reset"] = reset_links(cluster, leader, grpc_only=True)
            _probe(cluster, trial)
            time.sleep(factor * T)  # holding the fault is the fault
        finally:
            with contextlib.suppress(Exception):
                host.iptables("-t", "nat", "-F")
            cluster.heal(leader)
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()

    return run


def _resets_pause(times: int, pause: float) -> TrialInject:
    """``times`` cycles: every link between the leader and the other replicas reset, then
    the leader SIGSTOPped for ``pause`` seconds (shorter than the silence window), then
    ``RESETS_PAUSE_GAP_S`` of calm. Each cycle hits the replica leading then."""

    def run(cluster: KernelCluster, leader: int, T: float, trial: Trial) -> None:
        cycles: list[dict[str, Any]] = []
        trial.details["cycles"] = cycles
        victim = leader
        for n in range(times):
            if n:
                time.sleep(RESETS_PAUSE_GAP_S)  # holding the calm between is the fault too
                found = cluster.leader()
                victim = found[0] if found is not None else victim
            reset = reset_links(cluster, victim)
            cluster.signal(victim, signal.SIGSTOP)
            stopped = time.time()
            try:
                time.sleep(pause)  # holding the fault is the fault
            finally:
                cluster.signal(victim, signal.SIGCONT)
            cycles.append({"victim": victim, "links_reset": reset, "stopped": stopped,
                           "resumed": time.time()})  # fmt: skip

    return run


EXTRA_FAULTS: dict[str, TrialInject] = {
    "port-refuse-3T": _port_refuse(3.0),
    "resets-pause": _resets_pause(5, 1.3),
    "accept-close-proxy": _accept_close_proxy(3.0),
}
#: The slow-disk rows of issue 41 (any ``zk-slow-disk@D[+FAULT]`` works, FAULT from FAULTS).
SLOW_DISK_ROWS = (
    "zk-slow-disk@0.45",
    "zk-slow-disk@0.9",
    "zk-slow-disk@2",
    "zk-slow-disk@0.9+sigkill",
    "zk-slow-disk@0.9+sigstop-3T",
)
#: Seconds into the stall at which a ``+FAULT`` row hits the leader.
LEADER_FAULT_AFTER_S = 5.0


def known(fault: str) -> bool:
    """Whether ``fault`` names a fault :func:`run_trial` can make."""
    if fault in FAULTS or fault in EXTRA_FAULTS:
        return True
    spec = slow_disk.parse(fault)
    return spec is not None and (spec.then is None or spec.then in FAULTS)


def _trial_inject(fault: str) -> TrialInject:
    if fault in EXTRA_FAULTS:
        return EXTRA_FAULTS[fault]
    plain = FAULTS[fault]
    return lambda cluster, leader, T, trial: plain(cluster, leader, T)


@dataclass
class SyncedKernelCluster(KernelCluster):
    """A :class:`KernelCluster` whose ZooKeeper syncs its log (``forceSync=yes``), as a
    production server does: what a slow disk slows. Its slow syncs are logged from 200 ms."""

    def start_zookeeper_and_net(self) -> str:
        self.zk = ZooKeeperCluster(
            size=1,
            base_dir=self.workdir / "zk",
            force_sync=True,
            extra_config=(slow_disk.FSYNC_WARNING_CONFIG,),
        ).start()
        self.net.setup()
        zk_port = int(self.zk.connect_string.split(",")[0].rsplit(":", 1)[1])
        self.forwarder = FaultProxy("127.0.0.1", zk_port, listen_host=self.net.gateway).start()
        return self.forwarder.address


def _acks_after(workload: CliWorkload, t: float) -> int:
    return sum(1 for c in workload.snapshot() if c.ok and c.op.mutating and c.end > t)


def run_trial(cluster: KernelCluster, workload: CliWorkload, fault: str) -> Trial:
    spec = slow_disk.parse(fault)
    if spec is not None:
        return run_slow_disk_trial(cluster, workload, spec)
    T = cluster.session_timeout
    leader, epoch = _healthy_and_acknowledging(cluster, workload)
    trial = Trial(fault, leader, epoch, start=time.time())
    _trial_inject(fault)(cluster, leader, T, trial)
    trial.healed = time.time()
    _recover(cluster, workload, trial, [leader])
    return trial


def _healthy_and_acknowledging(cluster: KernelCluster, workload: CliWorkload) -> tuple[int, int]:
    leader, epoch = cluster.wait_healthy(120)
    settled = time.time()
    wait_until(lambda: _acks_after(workload, settled) >= 2, timeout=120, message="acks before")
    return leader, epoch


def _recover(
    cluster: KernelCluster, workload: CliWorkload, trial: Trial, victims: list[int]
) -> None:
    """Restart the victims that died, wait healthy and acknowledging; the figures."""
    for i in dict.fromkeys(victims):
        if not cluster.replicas[i].alive():
            cluster.spawn(i)
    trial.epoch_after = cluster.wait_healthy(120)[1]
    wait_until(lambda: _acks_after(workload, trial.healed) >= 1, timeout=120, message="acks after")
    if trial.epoch_after != trial.epoch_before:
        took = took_office_at(cluster, trial.epoch_after)
        trial.failover_s = None if took is None else round(took - trial.start, 3)
    write = first_write_of(cluster, trial.epoch_after, trial.start)
    trial.resumed_s = None if write is None else round(write - trial.start, 3)
    _finish_probes(cluster, trial)


def _finish_probes(cluster: KernelCluster, trial: Trial, timeout: float = 300.0) -> None:
    """Each probe submit's outcome, against the fault's window, and whether its topology
    was scheduled (read only where a supervisor offers slots)."""
    admin = cluster.admin()
    with_slots = bool(admin.get_children(Paths(ROOT).supervisors))
    end = trial.details.get("stall_end") or trial.healed
    found = []
    for probe in trial.probes:
        result = probe.join(timeout)
        answer: dict[str, Any] = {
            "name": result.name,
            "ok": result.ok,
            "started_s": round(result.start - trial.start, 2),
            "answered_s": round(result.end - trial.start, 2) if result.end else None,
            "answered_during_fault": result.ok and result.end <= end,
        }
        if not result.ok:
            answer["error"] = result.stderr[-300:]
        if result.ok and with_slots:
            answer.update(scheduled(admin, ROOT, result.name, timeout=60, since=trial.start))
        found.append(answer)
    if found:
        trial.details["probe_submits"] = found


def run_slow_disk_trial(
    cluster: KernelCluster, workload: CliWorkload, spec: slow_disk.SlowDisk
) -> Trial:
    """Every fsync of ZooKeeper delayed by ``spec.delay`` for ``STALL_S``; a fresh submit
    sent as it begins; with ``spec.then``, that fault made on the leader
    ``LEADER_FAULT_AFTER_S`` into the stall. A write timed from the admin client at the
    stall's start and end must take at least the delay, or ``trial.error`` says the stall
    did not work."""
    leader, epoch = _healthy_and_acknowledging(cluster, workload)
    admin = slow_disk.probe_client(cluster.zk.connect_string)
    try:
        return _slow_disk_trial(cluster, workload, spec, leader, epoch, admin)
    finally:
        slow_disk.close_client(admin)


def _slow_disk_trial(
    cluster: KernelCluster,
    workload: CliWorkload,
    spec: slow_disk.SlowDisk,
    leader: int,
    epoch: int,
    admin: KazooClient,
) -> Trial:
    T = cluster.session_timeout
    delay = spec.delay
    trial = Trial(spec.name, leader, epoch, start=time.time())
    trial.details.update(delay_s=delay, stall_s=slow_disk.STALL_S, then=spec.then)
    stall = slow_disk.FsyncStall(cluster.zk.pids(), delay, cluster.workdir / "strace")
    logs = slow_disk.LogMark([cluster.zk.log_path(i) for i in range(cluster.zk.size)])
    victims = [leader]
    inner: threading.Thread | None = None
    try:
        stall.start()
        trial.start = stall.started
        _probe(cluster, trial)
        took = slow_disk.timed_write(admin)
        trial.details["write_at_start_s"] = round(took, 3)
        slow_disk.check_stalled(took, delay, "at the stall's start")
        if spec.then is not None:
            inner = threading.Thread(
                target=_leader_fault_during, args=(cluster, spec.then, trial, T, victims),
                name="leader-fault", daemon=True,
            )  # fmt: skip
            time.sleep(max(0.0, trial.start + LEADER_FAULT_AFTER_S - time.time()))
            inner.start()
        # The last timed write ends about when the stall is due to.
        time.sleep(max(0.0, trial.start + slow_disk.STALL_S - 2 * delay - time.time()))
        took = slow_disk.timed_write(admin)
        trial.details["write_at_end_s"] = round(took, 3)
        slow_disk.check_stalled(took, delay, "at the stall's end")
    except (slow_disk.FsyncStallError, KazooException) as e:  # recorded, and loudly reported
        trial.error = f"{type(e).__name__}: {e}"
    finally:
        stall.stop()
        trial.details.update(
            stall_start=stall.started or trial.start,
            stall_end=stall.stopped or time.time(),
            syncs_delayed=stall.delayed(),
        )
        if inner is not None and inner.is_alive():
            inner.join()  # the leader fault may outlast the stall (3T at a long T)
    warned = logs.fsync_warnings()
    trial.details["zk_fsync_warnings"] = {"count": len(warned), "max_ms": max(warned, default=0)}
    trial.details["write_after_s"] = round(slow_disk.timed_write(admin), 3)
    trial.healed = time.time()
    _recover(cluster, workload, trial, victims)
    at = trial.details.get("leader_fault_at")
    if at is not None and trial.epoch_after > trial.details["victim_epoch"]:
        took_office = took_office_at(cluster, trial.details["victim_epoch"] + 1)
        trial.details["take_office_s"] = None if took_office is None else round(took_office - at, 3)
    return trial


def _leader_fault_during(
    cluster: KernelCluster, fault: str, trial: Trial, T: float, victims: list[int]
) -> None:
    """``fault`` on the replica leading now (the one before the stall if none claims)."""
    found = None
    with contextlib.suppress(AssertionError):
        found = wait_until(cluster.leader, timeout=10, interval=0.1, message="a leader to hit")
    victim, epoch = found if found is not None else (trial.leader, trial.epoch_before)
    victims.append(victim)
    trial.details.update(victim=victim, victim_epoch=epoch, leader_fault_at=time.time())
    FAULTS[fault](cluster, victim, T)
    trial.details["leader_fault_undone"] = time.time()
    if not cluster.replicas[victim].alive():  # as the sigkill row: restarted at once
        cluster.spawn(victim)


def took_office_at(cluster: KernelCluster, epoch: int) -> float | None:
    """Wall time ZooKeeper created ``/epochs/<epoch>``: the take-office multi-op."""
    stat = cluster.admin().exists(f"{ROOT}/epochs/{epoch}")
    return None if stat is None else stat.ctime / 1000.0


def first_write_of(cluster: KernelCluster, epoch: int, after: float) -> float | None:
    """Wall time of the first ``/requests`` record of ``epoch`` created after ``after``."""
    admin = cluster.admin()
    folder = f"{ROOT}/requests"
    first: float | None = None
    for name in admin.get_children(folder):
        try:
            data, stat = admin.get(f"{folder}/{name}")
        except NoNodeError:  # pruned by the leader's history bound since the listing
            continue
        created = stat.ctime / 1000.0
        if created <= after or records.RequestOutcome.FromString(data).epoch != epoch:
            continue
        first = created if first is None else min(first, created)
    return first


def measure(cluster: KernelCluster, workload: CliWorkload, trials: list[Trial]) -> None:
    """Fill in each trial's figures from the calls and ZooKeeper's own records."""
    calls = workload.snapshot()
    acks = sorted(c.end for c in calls if c.ok and c.op.mutating)
    starts = [t.start for t in trials]
    bounds = zip([float("-inf"), *starts[1:]], [*starts[1:], float("inf")], strict=True)
    for trial, (since, next_start) in zip(trials, bounds, strict=True):
        write = None if trial.resumed_s is None else trial.start + trial.resumed_s
        # The fault is over once undone and the leader in office writes again.
        over = trial.over = max(trial.healed, write or trial.healed)
        first = next((i for i, end in enumerate(acks) if end >= over), None)
        last = max((i for i, end in enumerate(acks) if end <= trial.start), default=None)
        if first is not None and last is not None:
            window = acks[last : first + 1]
            trial.unavailability_s = max(b - a for a, b in itertools.pairwise(window))
        # Each failed call is counted once: in the trial whose window it ended in.
        trial.failed = [c for c in calls if not c.ok and since <= c.end < next_start]


def quiet_gaps(workload: CliWorkload, trials: list[Trial]) -> list[float]:
    """Gaps between consecutive acknowledged changes outside every fault (from a trial's
    start to its ``over``): the workload's own cadence, to read the gaps under faults by."""
    acks = sorted(c.end for c in workload.snapshot() if c.ok and c.op.mutating)
    windows = [(t.start, t.over) for t in trials]
    return [
        b - a
        for a, b in itertools.pairwise(acks)
        if not any(a < end and b > start for start, end in windows)
    ]


def lost_or_duplicated(cluster: KernelCluster, workload: CliWorkload) -> list[str]:
    """Acknowledged changes missing from ZooKeeper, and names held by two records."""
    admin = cluster.admin()
    problems: list[str] = []
    by_name: dict[str, list[records.StormBase]] = {}
    admin.sync(ROOT)
    for tid in admin.get_children(f"{ROOT}/storms"):
        try:
            base = records.StormBase.FromString(admin.get(f"{ROOT}/storms/{tid}")[0])
        except NoNodeError:  # a killed topology swept since the listing
            continue
        by_name.setdefault(base.name, []).append(base)
    for name, bases in by_name.items():
        if len(bases) > 1:
            problems.append(f"{name}: {len(bases)} records")
    calls = workload.snapshot()
    killed = {c.name for c in calls if c.ok and c.op.name == "KILL"}
    for call in calls:
        if call.ok and call.op.name == "SUBMIT" and call.name not in killed:
            live = by_name.get(call.name, [])
            if not any(b.status != records.KILLED for b in live):
                problems.append(f"{call.name}: acknowledged submit not live")
    return problems
