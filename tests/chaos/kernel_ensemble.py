"""Three ``nimbus serve`` replicas in network namespaces over a 3-server ZooKeeper ensemble,
for ZooKeeper's own faults made by the kernel, and a record of who claimed leadership.

The servers run in the root namespace, their quorum and election links on loopback; their
client ports listen on every address, so each replica is given the three client addresses
on the bridge and connects straight to one of them, with no forwarder in the path: the
kernel alone carries (and, cut, drops) every packet. A server is cut from its peers whole
(``LoopbackPortCut`` with its pid: its own ports and the connections it opens to theirs)
while its clients still reach it; or it is SIGKILLed and started again on its data.

Leadership is what every replica answers to ``GetLeaderAddress``, asked of all three at
once every 50 ms (:class:`LeadershipPolls`); the figures (:func:`double_claims`,
:func:`longest_leaderless`) are pure functions of the recorded rounds.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc

from cluster.api import pb, rpc
from cluster.factory import channel_options
from devtools.netns import LoopbackPortCut
from devtools.zkserver import ZooKeeperCluster
from tests.chaos.cli_workload import CliCall, CliWorkload
from tests.chaos.kernel_cluster import KernelCluster
from tests.chaos.loops import Loops
from tests.waiting import wait_until

log = logging.getLogger(__name__)

#: A fault is over within this (a restart, an election, sessions moving) on an idle
#: machine in seconds; it is a deadline for a loaded CI machine, not a figure.
RECOVER_S = 180.0
#: The log line of a replica leaving a ZooKeeper server it finds behind its quorum.
MOVE_LINE = "leaving ZooKeeper server"


@dataclass
class KernelEnsemble(KernelCluster):
    """A :class:`KernelCluster` whose replicas use a 3-server ensemble directly."""

    subnet: str = "10.79.0"

    def start_zookeeper_and_net(self) -> str:
        self.zk = ZooKeeperCluster(
            size=3, base_dir=self.workdir / "zk", start_timeout=RECOVER_S, client_address="0.0.0.0"
        ).start()
        self.net.setup()
        return ",".join(f"{self.net.gateway}:{port}" for port in self.zk.client_ports)

    def stop_zookeeper_and_net(self) -> None:
        self.net.teardown()
        self.zk.stop()

    def server_of(self, i: int) -> int | None:
        """The ZooKeeper server replica ``i`` is connected to, as its namespace's kernel
        sees its connections (None between two)."""
        listing = subprocess.run(
            [*self.replicas[i].prefix, "ss", "-Htn", "state", "established"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
        ports = self.zk.client_ports
        for address in listing.split():
            host, _, port = address.rpartition(":")
            if host == self.net.gateway and port.isdigit() and int(port) in ports:
                return ports.index(int(port))
        return None

    def servers(self) -> dict[int, int]:
        """Replica index -> its ZooKeeper server, once every replica has one."""

        def known() -> dict[int, int] | None:
            found = {r.index: self.server_of(r.index) for r in self.replicas}
            connected = {i: s for i, s in found.items() if s is not None}
            return connected if len(connected) == len(found) else None

        found = wait_until(known, timeout=60, interval=0.1, message="every replica connected")
        assert found is not None
        return found

    def zk_leader(self) -> int:
        found = wait_until(self._zk_leader_found, timeout=RECOVER_S, interval=0.2,
                           message="a ZooKeeper leader")  # fmt: skip
        assert found is not None
        return found[0]

    def _zk_leader_found(self) -> tuple[int] | None:
        index = self.zk.leader_index()
        return None if index is None else (index,)  # a tuple: server 0 must count as found

    def moves(self) -> int:
        """How many times the replicas have left a server they found behind its quorum."""
        return sum(r.log_path.read_text("utf-8", "replace").count(MOVE_LINE) for r in self.replicas)


# -- leadership, as the replicas answer it ------------------------------------------------


@dataclass(frozen=True)
class Poll:
    at: float  # time.monotonic() when the round was sent to every replica
    claims: dict[int, int]  # replica index -> epoch, of each one answering as the leader
    #: One letter per replica: L leader, F follower, U unavailable (no fresh view),
    #: T no answer in time, E another error.
    answers: str = ""


class LeadershipPolls(Loops):
    """Asks every replica at once, every ``interval`` s, whether it leads; keeps each round.

    A replica that does not answer within ``timeout`` makes no claim in that round: to a
    client it is no leader either.
    """

    def __init__(
        self, addresses: Sequence[str], interval: float = 0.05, timeout: float = 1.0
    ) -> None:
        super().__init__(self._run, [0], name="leadership-polls", join_s=30)  # one thread
        # Keepalive as the project's clients have it: a connection that lived through a
        # partition of its replica stalls after the heal for as long as TCP's
        # retransmission backoff (up to 2 min; 43 s seen, a replica "not answering" long
        # after it served the CLI again); only an unanswered PING ends it. Then reconnect
        # within a fraction of a second, not gRPC's default of up to two minutes.
        options = [*(o for o in channel_options() if "reconnect_backoff" not in o[0]),
                   ("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 500)]  # fmt: skip
        self._channels = [grpc.insecure_channel(a, options=options) for a in addresses]
        self._stubs = [rpc.NimbusStub(c) for c in self._channels]
        self._interval = interval
        self._timeout = timeout
        self._rounds: list[Poll] = []
        self._lock = threading.Lock()

    def stop(self) -> None:
        super().stop()
        for channel in self._channels:
            channel.close()

    def rounds(self, since: float = float("-inf"), until: float = float("inf")) -> list[Poll]:
        with self._lock:
            return [p for p in self._rounds if since <= p.at <= until]

    def _run(self, _: int) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            try:
                taken = self._poll(began)
                with self._lock:
                    self._rounds.append(taken)
            except Exception:  # a missing round shows as a longer stretch: say why, go on
                log.exception("a leadership poll failed")
            self.stopping.wait(max(0.0, self._interval - (time.monotonic() - began)))

    def _poll(self, at: float) -> Poll:
        request = pb.GetLeaderAddressRequest()
        asked = [s.GetLeaderAddress.future(request, timeout=self._timeout) for s in self._stubs]
        claims: dict[int, int] = {}
        answers = ""
        for i, answer in enumerate(asked):
            try:
                reply = answer.result()
            except grpc.RpcError as e:
                answers += _ERROR_LETTERS.get(e.code(), "E")
                continue
            answers += "L" if reply.responder_is_leader else "F"
            if reply.responder_is_leader:
                claims[i] = int(reply.epoch)
        return Poll(at, claims, answers)


_ERROR_LETTERS = {grpc.StatusCode.UNAVAILABLE: "U", grpc.StatusCode.DEADLINE_EXCEEDED: "T"}


def double_claims(polls: Sequence[Poll]) -> list[str]:
    """Every round in which two or more replicas answered as the leader."""
    return [f"at {p.at:.2f}: {p.claims}" for p in polls if len(p.claims) > 1]


def leaderless(polls: Sequence[Poll]) -> list[tuple[float, float]]:
    """Each stretch of rounds in which no replica claimed leadership, as (from, to): from
    the last round with a claim before it to the first one after (or the end of the
    record), an upper bound by at most a round's length at each end."""
    stretches: list[tuple[float, float]] = []
    last_claim, open_stretch = (polls[0].at if polls else 0.0), False
    for p in polls:
        if not p.claims:
            open_stretch = True
            continue
        if open_stretch:
            stretches.append((last_claim, p.at))
        last_claim, open_stretch = p.at, False
    if open_stretch:
        stretches.append((last_claim, polls[-1].at))
    return stretches


def longest_leaderless(polls: Sequence[Poll]) -> float:
    """Seconds of the longest stretch with no replica claiming; 0 when every round had one."""
    return max((to - since for since, to in leaderless(polls)), default=0.0)


# -- ZooKeeper's faults, each injected, held and undone ----------------------------------

#: Called by a fault at the instant it is in place (the figures count from there).
Mark = Callable[[], None]
#: (ensemble, index of the Nimbus leader, T, mark) -> what was hit, in words.
Inject = Callable[[KernelEnsemble, int, float, Mark], str]


def _cut_from_peers(ens: KernelEnsemble, victim: int, seconds: float, mark: Mark) -> str:
    """Cut server ``victim`` from its peers, whole, for ``seconds``; its clients still reach
    it. Fails if it never leaves its quorum: a cut that changes nothing proves nothing."""
    zk = ens.zk
    pid = zk.pid(victim)
    assert pid is not None, f"ZooKeeper server {victim} is not running"
    peers = [port for j in range(zk.size) if j != victim for port in zk.quorum_ports(j)]
    cut = LoopbackPortCut(zk.quorum_ports(victim), owner=pid, peer_ports=peers)
    cut.cut()
    mark()
    start = time.monotonic()
    try:
        wait_until(lambda: zk.node_mode(victim) is None, timeout=60, interval=0.1,
                   message=f"ZooKeeper server {victim} leaving its quorum")  # fmt: skip
        left = time.monotonic() - start
        time.sleep(max(0.0, seconds - left))  # holding the fault is the fault
        on_it = [r.index for r in ens.replicas if ens.server_of(r.index) == victim]
    finally:
        cut.heal()
    return f"out of its quorum after {left:.1f} s; replicas on it at the heal {on_it}"


def cut_followers_server(ens: KernelEnsemble, leader: int, T: float, mark: Mark) -> str:
    """A server Nimbus followers are connected to, cut from its peers for 2T: the one most
    of them use, rather one the Nimbus leader is not on (another case is the leader's),
    rather a ZooKeeper follower (another case is the ZooKeeper leader)."""
    servers = ens.servers()
    zk_leader = ens.zk_leader()
    used = [s for i, s in servers.items() if i != leader]

    def score(server: int) -> tuple[int, bool, bool]:
        return used.count(server), server != servers[leader], server != zk_leader

    victim = max(range(ens.zk.size), key=score)
    role = "leader" if victim == zk_leader else "follower"
    serving = sorted(i for i, s in servers.items() if s == victim)
    done = _cut_from_peers(ens, victim, 2 * T, mark)
    return f"zk server {victim} ({role}) of replicas {serving}; {done}"


def cut_leaders_server(ens: KernelEnsemble, leader: int, T: float, mark: Mark) -> str:
    """The server the Nimbus leader is connected to, cut from its peers for 2T."""
    victim = ens.servers()[leader]
    role = "leader" if victim == ens.zk_leader() else "follower"
    done = _cut_from_peers(ens, victim, 2 * T, mark)
    return f"zk server {victim} ({role}) of the Nimbus leader {leader}; {done}"


def cut_zk_leader(ens: KernelEnsemble, leader: int, T: float, mark: Mark) -> str:
    """The ZooKeeper leader cut from its peers for 2T: no write commits until the others
    notice (syncLimit) and elect, whoever is connected to it."""
    victim = ens.zk_leader()
    on_it = sorted(i for i, s in ens.servers().items() if s == victim)
    done = _cut_from_peers(ens, victim, 2 * T, mark)
    return f"zk server {victim} (leader) of replicas {on_it}; {done}"


def rolling_restart(ens: KernelEnsemble, leader: int, T: float, mark: Mark) -> str:
    """SIGKILL every server in turn, the ZooKeeper leader last, each started again on its
    data and the ensemble whole before the next: an operator's restart, under load."""
    zk = ens.zk
    zk_leader = ens.zk_leader()
    order = [i for i in range(zk.size) if i != zk_leader] + [zk_leader]
    took = []
    mark()
    for i in order:
        began = time.monotonic()
        zk.restart(i, timeout=RECOVER_S)  # SIGKILL, start on the same data, serving
        zk.heal(RECOVER_S)  # every server serving, one leader
        took.append(f"{time.monotonic() - began:.1f}")
    return f"zk servers {order} in turn, whole again after {', '.join(took)} s"


FAULTS: dict[str, Inject] = {
    "zk-cut-nimbus-followers-server-from-peers": cut_followers_server,
    "zk-cut-nimbus-leaders-server-from-peers": cut_leaders_server,
    "zk-cut-zk-leader-from-peers": cut_zk_leader,
    "zk-rolling-sigkill-restart": rolling_restart,
}


@dataclass
class Outcome:
    fault: str
    leader: int
    epoch_before: int
    servers_before: dict[int, int]
    start: float  # monotonic
    start_wall: float
    target: str = ""
    healed: float = 0.0
    end: float = 0.0
    end_wall: float = 0.0
    epoch_after: int = 0
    moves: int = 0
    polls: list[Poll] = field(default_factory=list)
    failed: list[CliCall] = field(default_factory=list)

    def figures(self) -> str:
        stretches = leaderless(self.polls)
        worst = "none"
        if stretches:
            since, to = max(stretches, key=lambda s: s[1] - s[0])
            said = Counter(p.answers[self.leader] for p in self.polls if since < p.at < to)
            worst = (
                f"{to - since:.2f} s, from {since - self.start:+.2f} s to "
                f"{to - self.start:+.2f} s, the leader answering {dict(said)}"
            )
        failed = [
            f"{c.op.value} at {c.end - self.start_wall:+.1f} s: {c.stderr[-160:]!r}"
            for c in self.failed
        ]
        return (
            f"{self.fault} at {time.strftime('%H:%M:%S', time.gmtime(self.start_wall))}: "
            f"Nimbus leader {self.leader} on zk server "
            f"{self.servers_before.get(self.leader)}; {self.target}; held and healed in "
            f"{self.healed - self.start:.1f} s, recovered {self.end - self.healed:.1f} s after; "
            f"longest with no leader: {worst} of the fault; rounds {len(self.polls)}, with two "
            f"claims {len(double_claims(self.polls))}; epochs {self.epoch_before}->"
            f"{self.epoch_after}; server moves {self.moves}; failed CLI calls {failed}"
        )


def _acks_after(workload: CliWorkload, wall: float) -> int:
    return sum(1 for c in workload.snapshot() if c.ok and c.op.mutating and c.end > wall)


def run_fault(
    ens: KernelEnsemble, workload: CliWorkload, polls: LeadershipPolls, fault: str
) -> Outcome:
    """On a healthy cluster taking writes: inject, hold, heal, wait healthy and writing."""
    ens.zk.heal(RECOVER_S)
    leader, epoch = ens.wait_healthy(RECOVER_S)
    settled = time.time()
    wait_until(lambda: _acks_after(workload, settled) >= 2, timeout=RECOVER_S,
               message="acknowledged changes before the fault")  # fmt: skip
    moves = ens.moves()
    out = Outcome(fault, leader, epoch, ens.servers(), time.monotonic(), time.time())

    def mark() -> None:
        out.start, out.start_wall = time.monotonic(), time.time()

    out.target = FAULTS[fault](ens, leader, ens.session_timeout, mark)
    out.healed, healed_wall = time.monotonic(), time.time()
    ens.zk.heal(RECOVER_S)
    out.epoch_after = ens.wait_healthy(RECOVER_S)[1]
    wait_until(lambda: _acks_after(workload, healed_wall) >= 1, timeout=RECOVER_S,
               message="an acknowledged change after the heal")  # fmt: skip
    out.end, out.end_wall = time.monotonic(), time.time()
    out.moves = ens.moves() - moves
    out.polls = polls.rounds(out.start, out.end)
    out.failed = [
        c for c in workload.snapshot() if not c.ok and out.start_wall <= c.end <= out.end_wall
    ]
    return out
