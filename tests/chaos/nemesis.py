"""The nemesis: one fault at a time, held for a set time, then undone.

Each fault is a function that injects and heals, stamping ``Fault.start`` (injected)
and ``Fault.healed`` (undone: the signal sent, the link forwarding, the ZooKeeper node
serving again). Holding a fault for its duration is the fault itself, not a wait for
something to happen; everything else here waits on observed state with a deadline.

A slow ZooKeeper disk (issue 41, ``zk-slow-disk@D``), selected by name only and in no
matrix, is in ``tests.chaos.nemesis_slow_disk``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devtools.netns import LoopbackPortCut
from leader.settings import DEFAULT_SILENCE_WINDOW
from tests.chaos import zk_digest
from tests.chaos.harness import ChaosCluster, LeaderView
from tests.chaos.history import Fault, History
from tests.waiting import wait_until

Inject = Callable[["Nemesis", Fault, LeaderView], None]


@dataclass(frozen=True)
class FaultKind:
    name: str
    run: Inject
    target: str  # which acceptance figure applies: see ``availability.TARGETS``
    needs_root: bool = False
    small_code_disks: bool = False  # the replicas' code dirs on small tmpfs mounts (root)
    # A pause of the leader for this many T: shorter than the silence window P it must not
    # move the leader ("same-leader"); as long as P or longer it must, within P + 2 s.
    pause_T: float | None = None

    def target_at(self, session_timeout: float) -> str:
        """The target that applies at this T (DESIGN item 8 turns a long pause into a
        failover: ``pause-leader-T/2`` is 1 s at T = 2 s, 10 s at T = 20 s)."""
        if self.pause_T is not None and self.pause_T * session_timeout >= DEFAULT_SILENCE_WINDOW:
            return "P+2"
        return self.target


class Nemesis:
    def __init__(self, cluster: ChaosCluster, history: History) -> None:
        self.cluster = cluster
        self.history = history
        self.T = cluster.session_timeout

    def hold(self, seconds: float) -> None:
        """Keep the fault in place: this *is* the fault, not synchronisation."""
        time.sleep(seconds)

    def held(
        self, fault: Fault, seconds: float, inject: Callable[[], None], heal: Callable[[], None]
    ) -> None:
        """Inject the fault, hold it ``seconds``, then heal it however the hold ends."""
        self.mark(fault)
        inject()
        try:
            self.hold(seconds)
        finally:
            heal()
            self.healed(fault)

    def trial(self, kind: FaultKind, trial: int, recover_timeout: float = 60.0) -> Fault:
        """Inject ``kind`` once on a healthy cluster, undo it, wait for recovery."""
        # A whole ensemble first: a server cut and healed by the trial before may still be
        # rejoining, and cutting another then takes the quorum (two faults, not one).
        self.cluster.zk.heal(recover_timeout)
        before = self.cluster.wait_healthy(recover_timeout)
        self._wait_writes_after(self.history.now(), 2, recover_timeout)
        fault = Fault(kind.name, trial, start=0.0, epoch_before=before.epoch)
        digests = zk_digest.mismatches(self.cluster.zk)
        try:
            kind.run(self, fault, before)
        except Exception as e:  # the nemesis failed, not the service: say so, heal, go on
            fault.note = f"nemesis error: {e!r}"[:2000]
            self.cluster.heal_all()
        finally:
            if not fault.start:
                fault.start = self.history.now()
            if not fault.healed:
                fault.healed = self.history.now()
            self.history.add_fault(fault)
        try:
            after = self.cluster.wait_healthy(recover_timeout)
            self._wait_writes_after(fault.healed, 1, recover_timeout)
        except AssertionError as e:
            fault.note = str(e)[:2000]
            self.cluster.heal_all()
            return fault
        finally:
            if digests:
                fault.zk_diverged = zk_digest.rose(digests, zk_digest.mismatches(self.cluster.zk))
        fault.epoch_after = after.epoch
        fault.leader_after = after.index
        fault.recovered = not fault.note.startswith("nemesis error")
        return fault

    def _wait_writes_after(self, t: float, count: int, timeout: float) -> None:
        def done() -> bool:
            return sum(1 for c in self.history.ok_writes() if c.end > t) >= count

        wait_until(done, timeout=timeout, interval=0.05, message=f"{count} ok write(s)")

    def mark(self, fault: Fault) -> None:
        fault.start = self.history.now()

    def healed(self, fault: Fault) -> None:
        fault.healed = self.history.now()


# -- faults on the leader process --------------------------------------------------------


def _stop_and_restart(n: Nemesis, f: Fault, leader: LeaderView, signum: signal.Signals) -> None:
    """Stop the leader with ``signum`` (the fault is over once it has stopped; the next
    trial chases the new leader), then restart it as a follower."""
    n.mark(f)
    n.cluster.kill(leader.index, signum)
    n.healed(f)
    n.cluster.restart(leader.index)


def sigkill_leader(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """Crash the leader; restart it as a follower."""
    f.target = f"replica {leader.index}"
    _stop_and_restart(n, f, leader, signal.SIGKILL)


def sigterm_leader(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    f.target = f"replica {leader.index}"
    _stop_and_restart(n, f, leader, signal.SIGTERM)


def _pause(factor: float) -> Inject:
    def run(n: Nemesis, f: Fault, leader: LeaderView) -> None:
        f.target = f"replica {leader.index}"
        i = leader.index
        n.held(f, factor * n.T, lambda: n.cluster.pause(i), lambda: n.cluster.resume(i))

    return run


# -- faults on links ---------------------------------------------------------------------


def _cut_zookeeper(direction: str, factor: float) -> Inject:
    def run(n: Nemesis, f: Fault, leader: LeaderView) -> None:
        f.target = f"replica {leader.index} {direction}"
        i = leader.index
        cut, heal = n.cluster.cut_zookeeper, n.cluster.heal_zookeeper
        n.held(f, factor * n.T, lambda: cut(i, direction), lambda: heal(i))

    return run


def cut_clients(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """The leader keeps ZooKeeper but nobody reaches its gRPC port: down by nature."""
    f.target = f"replica {leader.index}"
    i = leader.index
    n.held(f, 2 * n.T, lambda: n.cluster.cut_front(i), lambda: n.cluster.heal_front(i))


# -- faults on ZooKeeper ---------------------------------------------------------------


def _zk_leader(n: Nemesis) -> int:
    def leader() -> tuple[int] | None:
        index = n.cluster.zk.leader_index()
        return None if index is None else (index,)  # a tuple: node 0 must count as found

    found = wait_until(leader, timeout=30, message="a ZooKeeper leader")
    assert found is not None
    return found[0]


def _zk_kill(role: str) -> Inject:
    def run(n: Nemesis, f: Fault, leader: LeaderView) -> None:
        zk = n.cluster.zk
        zk_leader = _zk_leader(n)
        if role == "leader":
            victim = zk_leader
        else:
            connected = n.cluster.zk_node_of(leader.index)
            followers = [i for i in range(zk.size) if i != zk_leader]
            victim = connected if connected in followers else followers[0]
        f.target = f"zk node {victim} ({role})"
        n.held(f, 2 * n.T, lambda: zk.kill(victim), lambda: zk.restart(victim))

    return run


#: Followers drop a silent ZooKeeper leader after syncLimit (about 5 s, ``zkserver``); the
#: election without it then waits out connection timeouts: 10-30 s seen, so allow 60.
ZK_PEER_CUT_ELECTION_S = 60.0


def zk_leader_ports_cut_one_way(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """The kernel drops every packet to or from the ZooKeeper leader server's quorum and
    election ports (its client port still answers) until the other servers have elected
    a leader without it. A partial, one-way partition: the connections it opens to its
    peers' election ports still work (all servers share 127.0.0.1, so only ports tell
    them apart). When the cut server has the highest id it keeps winning the elections
    it can no longer lead (its votes get out, nobody can connect to it), so ZooKeeper's
    own election takes 3-40 s (``bench/results/zk-election.txt``), longer than
    the sessions and the Nimbus replicas may queue again: the target is that writes
    resume soon after the ensemble is whole again. ``zk-cut-leader-from-peers`` is the
    whole cut of the same server.

    Found with it: ZooKeeper 3.9.5 can come out of this with a follower that keeps
    sessions and ephemeral nodes the leader does not have (see README, "Measured");
    replicas reading from that follower wait behind lock nodes nobody holds.
    """
    zk = n.cluster.zk
    victim = _zk_leader(n)
    f.target = f"zk node {victim} (leader) cut from its peers"
    cut = LoopbackPortCut(zk.quorum_ports(victim))
    n.mark(f)
    cut.cut()
    try:
        others = [i for i in range(zk.size) if i != victim]
        wait_until(
            lambda: any(zk.node_mode(i) == "leader" for i in others),
            timeout=ZK_PEER_CUT_ELECTION_S,
            interval=0.2,
            message="the other ZooKeeper servers electing a leader",
        )
    finally:
        cut.heal()
        n.healed(f)


def _cut_from_peers(n: Nemesis, f: Fault, victim: int, role: str) -> None:
    """Cut ZooKeeper server ``victim`` from its peers, whole (its own ports, and what its
    process sends to theirs: by its own ports alone a follower stays in the quorum), for
    2T, then heal: it leaves the quorum, its clients move, and after the heal it rejoins
    and may keep what the quorum dropped (ZOOKEEPER-4837, -5010). A cut that never takes
    the server out of its quorum proves nothing and fails the trial."""
    zk = n.cluster.zk
    pid = zk.pid(victim)
    assert pid is not None, f"ZooKeeper server {victim} is not running"
    peers = [port for j in range(zk.size) if j != victim for port in zk.quorum_ports(j)]
    cut = LoopbackPortCut(zk.quorum_ports(victim), owner=pid, peer_ports=peers)
    f.target = f"zk node {victim} ({role}) cut from its peers"
    n.mark(f)
    cut.cut()
    try:
        wait_until(lambda: zk.node_mode(victim) is None, timeout=60, interval=0.1,
                   message=f"ZooKeeper server {victim} leaving its quorum")  # fmt: skip
        n.hold(2 * n.T)
    finally:
        cut.heal()
        n.healed(f)


def zk_cut_leader_from_peers(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """The ZooKeeper leader cut from its peers, whole, for 2T: no write commits until the
    others notice (syncLimit) and elect, whoever is connected to it."""
    _cut_from_peers(n, f, _zk_leader(n), "leader")


def zk_cut_used_follower_from_peers(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """A ZooKeeper follower that Nimbus replicas are connected to, cut from its peers."""
    zk_leader = _zk_leader(n)
    used = [n.cluster.zk_node_of(i) for i in range(len(n.cluster.nodes))]
    followers = [i for i in range(n.cluster.zk.size) if i != zk_leader]
    victim = max(followers, key=used.count)
    _cut_from_peers(n, f, victim, f"follower serving {used.count(victim)} replica(s)")


def zk_cut_nimbus_leaders_server_from_peers(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """The ZooKeeper server the Nimbus leader is connected to, cut from its peers."""
    victim = n.cluster.zk_node_of(leader.index)
    if victim is None:
        victim = _zk_leader(n)
    role = "leader" if victim == _zk_leader(n) else "follower"
    _cut_from_peers(n, f, victim, f"{role}, the Nimbus leader's server")


def zk_rolling_restart(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """SIGKILL every ZooKeeper server in turn, the leader last, each restarted and serving
    before the next: an operator's rolling restart, under the client workload."""
    zk = n.cluster.zk
    zk_leader = _zk_leader(n)
    order = [i for i in range(zk.size) if i != zk_leader] + [zk_leader]
    f.target = f"zk nodes {order} in turn"
    n.mark(f)
    try:
        for i in order:
            zk.restart(i)  # kill, start on the same data, return once it serves
            wait_until(
                lambda: all(zk.node_mode(j) in ("leader", "follower") for j in range(zk.size)),
                timeout=60,
                interval=0.2,
                message="the ensemble whole again",
            )
    finally:
        n.healed(f)


def kazoo_loop_killed(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """The leader's kazoo connection loop meets an exception it does not expect: the
    replica must exit loudly (``cluster.zkloop``), and it is restarted, as a pod would be."""
    i = leader.index
    trigger = n.cluster.loop_trigger(i)
    f.target = f"replica {i}"
    n.mark(f)
    trigger.touch()
    try:
        replica = n.cluster.nodes[i].replica
        assert replica.proc is not None
        code = wait_until(replica.proc.poll, timeout=30, interval=0.05,
                          message="the replica exiting after its kazoo loop died")  # fmt: skip
        f.note = f"exit status {code}"
    finally:
        trigger.unlink(missing_ok=True)
        n.healed(f)
    n.cluster.restart(i)


def _quorum_loss(factor: float) -> Inject:
    def run(n: Nemesis, f: Fault, leader: LeaderView) -> None:
        zk = n.cluster.zk
        zk_leader = _zk_leader(n)
        victims = [zk_leader, next(i for i in range(zk.size) if i != zk_leader)]
        f.target = f"zk nodes {victims}"

        def kill() -> None:
            for v in victims:
                zk.kill(v)

        def restart() -> None:
            threads = [threading.Thread(target=zk.restart, args=(v,)) for v in victims]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        n.held(f, factor * n.T, kill, restart)

    return run


# -- faults on disks -------------------------------------------------------------------


def _next_in_line(n: Nemesis, leader: LeaderView) -> int:
    """The follower whose lock node is first after the leader's: the next to win."""
    admin = n.cluster.admin()
    queue = sorted(admin.get_children("/storm/leader-lock"), key=lambda c: c[-10:])
    for child in queue:
        owner = admin.get(f"/storm/leader-lock/{child}")[0].decode()
        index = n.cluster.index_of(owner)
        if index is not None and index != leader.index:
            return index
    return next(i for i in range(len(n.cluster.nodes)) if i != leader.index)


def truncate_then_kill(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """Damage a package on the next leader-to-be, then crash the leader: its gate must see."""
    follower = _next_in_line(n, leader)
    code_dir = n.cluster.nodes[follower].code_dir
    packages = sorted(p for p in code_dir.iterdir() if len(p.name) == 64 and p.is_file())
    if packages:
        victim = packages[len(packages) // 2]
        os.chmod(victim, 0o644)
        with victim.open("r+b") as file:
            file.truncate(max(1, victim.stat().st_size // 2))
        f.note = f"truncated {victim.name[:12]} on replica {follower}"
    f.target = f"replica {leader.index} (truncated on {follower})"
    _stop_and_restart(n, f, leader, signal.SIGKILL)


def disk_full(n: Nemesis, f: Fault, leader: LeaderView) -> None:
    """Fill a follower's code filesystem while submissions make it download, then free it."""
    follower = _next_in_line(n, leader)
    node = n.cluster.nodes[follower]
    if node.tmpfs is None:
        raise RuntimeError("disk-full needs code dirs on tmpfs (ChaosCluster(tmpfs_code_dirs))")
    filler = node.tmpfs / ".filler"
    f.target = f"replica {follower}"
    n.held(f, 2 * n.T, lambda: _fill(filler), lambda: filler.unlink(missing_ok=True))


def _fill(path: Path) -> None:
    block = b"\0" * (1 << 20)
    with path.open("wb", buffering=0) as out:
        for size in (len(block), 4096):  # whole megabytes, then the last partial one
            with contextlib.suppress(OSError):
                while True:
                    out.write(block[:size])


FAULTS: dict[str, FaultKind] = {
    k.name: k
    for k in (
        FaultKind("sigkill-leader", sigkill_leader, "T+2"),
        FaultKind("sigterm-leader", sigterm_leader, "1"),
        FaultKind("pause-leader-2T", _pause(2.0), "T+2"),
        FaultKind("pause-leader-T/2", _pause(0.5), "same-leader", pause_T=0.5),
        FaultKind("zk-cut-leader-both", _cut_zookeeper("both", 3.0), "T+2"),
        FaultKind("zk-cut-zk-to-leader", _cut_zookeeper("downstream", 3.0), "2T+2"),
        FaultKind("zk-cut-leader-to-zk", _cut_zookeeper("upstream", 3.0), "2T+2"),
        FaultKind("clients-cut-leader", cut_clients, "heal+2"),
        FaultKind("zk-kill-follower", _zk_kill("follower"), "same-leader"),
        FaultKind("zk-kill-leader", _zk_kill("leader"), "same-leader"),
        FaultKind("zk-cut-leader-from-peers", zk_cut_leader_from_peers, "heal+2", needs_root=True),
        FaultKind(
            "zk-leader-ports-cut-one-way", zk_leader_ports_cut_one_way, "heal+2", needs_root=True
        ),
        FaultKind(
            "zk-cut-used-follower-from-peers",
            zk_cut_used_follower_from_peers,
            "heal+2",
            needs_root=True,
        ),
        FaultKind(
            "zk-cut-nimbus-leaders-server-from-peers",
            zk_cut_nimbus_leaders_server_from_peers,
            "heal+2",
            needs_root=True,
        ),
        FaultKind("zk-rolling-restart", zk_rolling_restart, "heal+2"),
        FaultKind("kazoo-loop-killed", kazoo_loop_killed, "T+2"),
        FaultKind("zk-quorum-loss-T/2", _quorum_loss(0.5), "heal+2"),
        FaultKind("zk-quorum-loss-3T", _quorum_loss(3.0), "heal+2"),
        FaultKind("truncate-then-kill", truncate_then_kill, "T+2"),
        FaultKind("disk-full-follower", disk_full, "none", needs_root=True, small_code_disks=True),
    )
}
