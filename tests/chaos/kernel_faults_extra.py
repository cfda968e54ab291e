"""Issue 41's kernel faults: those that must not depose a healthy leader, and a slow disk.

Beside the matrix of ``tests.chaos.kernel_faults``, selectable by name but in no test's
matrix: ``EXTRA_FAULTS``, faults that must not depose a healthy leader, and the slow-disk
rows ``zk-slow-disk@D[+FAULT]`` (``tests.chaos.slow_disk``; they need ZooKeeper with fsync
on: :class:`SyncedKernelCluster`), with the trial that runs one (:func:`run_slow_disk_trial`).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from devtools.faultproxy import FaultProxy
from devtools.netns import Cut
from devtools.zkserver import ZooKeeperCluster
from tests.chaos import slow_disk
from tests.chaos.cli_workload import CliWorkload
from tests.chaos.kernel_cluster import GRPC_PORT, KernelCluster
from tests.chaos.kernel_trial import (
    Inject,
    Trial,
    TrialInject,
    healthy_and_acknowledging,
    recover,
    took_office_at,
)
from tests.chaos.probes import ProbeSubmit
from tests.cluster import REPO
from tests.waiting import wait_until

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


# -- a slow ZooKeeper disk (issue 41) ----------------------------------------------------

#: The slow-disk rows of issue 41 (any ``zk-slow-disk@D[+FAULT]`` works, FAULT from
#: ``kernel_faults.FAULTS``).
SLOW_DISK_ROWS = (
    "zk-slow-disk@0.45",
    "zk-slow-disk@0.9",
    "zk-slow-disk@2",
    "zk-slow-disk@0.9+sigkill",
    "zk-slow-disk@0.9+sigstop-3T",
)
#: Seconds into the stall at which a ``+FAULT`` row hits the leader.
LEADER_FAULT_AFTER_S = 5.0


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


def run_slow_disk_trial(
    cluster: KernelCluster,
    workload: CliWorkload,
    spec: slow_disk.SlowDisk,
    matrix: Mapping[str, Inject],
) -> Trial:
    """Every fsync of ZooKeeper delayed by ``spec.delay`` for ``STALL_S``; a fresh submit
    sent as it begins; with ``spec.then``, that fault made on the leader
    ``LEADER_FAULT_AFTER_S`` into the stall. A write timed from the admin client at the
    stall's start and end must take at least the delay, or ``trial.error`` says the stall
    did not work. ``matrix``: the faults ``spec.then`` names (``kernel_faults.FAULTS``,
    passed in by ``kernel_faults.run_trial``, which runs this)."""
    leader, epoch = healthy_and_acknowledging(cluster, workload)
    admin = slow_disk.probe_client(cluster.zk.connect_string)
    try:
        return _slow_disk_trial(cluster, workload, spec, matrix, leader, epoch, admin)
    finally:
        slow_disk.close_client(admin)


def _slow_disk_trial(
    cluster: KernelCluster,
    workload: CliWorkload,
    spec: slow_disk.SlowDisk,
    matrix: Mapping[str, Inject],
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
                target=_leader_fault_during,
                args=(cluster, matrix, spec.then, trial, T, victims),
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
    recover(cluster, workload, trial, victims)
    at = trial.details.get("leader_fault_at")
    if at is not None and trial.epoch_after > trial.details["victim_epoch"]:
        took_office = took_office_at(cluster, trial.details["victim_epoch"] + 1)
        trial.details["take_office_s"] = None if took_office is None else round(took_office - at, 3)
    return trial


def _leader_fault_during(
    cluster: KernelCluster,
    matrix: Mapping[str, Inject],
    fault: str,
    trial: Trial,
    T: float,
    victims: list[int],
) -> None:
    """``fault`` on the replica leading now (the one before the stall if none claims)."""
    found = None
    with contextlib.suppress(AssertionError):
        found = wait_until(cluster.leader, timeout=10, interval=0.1, message="a leader to hit")
    victim, epoch = found if found is not None else (trial.leader, trial.epoch_before)
    victims.append(victim)
    trial.details.update(victim=victim, victim_epoch=epoch, leader_fault_at=time.time())
    matrix[fault](cluster, victim, T)
    trial.details["leader_fault_undone"] = time.time()
    if not cluster.replicas[victim].alive():  # as the sigkill row: restarted at once
        cluster.spawn(victim)
