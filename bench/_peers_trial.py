"""One trial of bench/peers.py: three fresh candidates of one system on a fresh path, each in
a network namespace; wait until they are queued and one leads, inject the fault on the
leader, time the first "I lead" of a new one, kill what is left.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from _common import REPO, BenchError, pdeathsig_prefix
from _peers_figures import SLOW_DISK, parse_lead, parse_poll_reply
from _peers_stores import START_TIMEOUT_S, Etcd, log, tail

CANDIDATES = 3
GRPC_PORT = 6627
SETTLE_S = 3.0  # after all three are queued: the leader's successor watches it a while
PAUSE_FACTOR = 1.5  # SIGSTOP held for 1.5 T
EXIT_TIMEOUT_S = 30.0
WRITE_CHECK_PATH = "/peers-write-check"  # ZooKeeper
WRITE_CHECK_KEY = "peers-write-check"  # etcd
JVM_FLAGS = ("-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


# -- candidates -------------------------------------------------------------------------


@dataclass(frozen=True)
class Lead:
    index: int  # the candidate (and namespace) that leads
    at_s: float  # Unix seconds, as the system reports it
    seen_s: float  # when the bench read the line


@dataclass
class Candidate:
    index: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    reader: threading.Thread | None = None
    #: Where its answers to the bench's ``poll N`` go: (N, it leads, monotonic s read).
    on_poll: Callable[[int, bool, float], None] | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Leads:
    """Every "I lead" line of a trial's candidates, in the order read."""

    seen: list[Lead] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def add(self, lead: Lead) -> None:
        with self.cond:
            self.seen.append(lead)
            self.cond.notify_all()

    def wait(self, accept: Callable[[Lead], bool], timeout: float) -> Lead | None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = next((lead for lead in self.seen if accept(lead)), None)
                left = deadline - time.monotonic()
                if found is not None or left <= 0:
                    return found
                self.cond.wait(left)


def read_lines(
    system: str, candidate: Candidate, stream: IO[bytes], leads: Leads, lock_name: str
) -> None:
    with candidate.log_path.open("ab") as out:
        for raw in iter(stream.readline, b""):
            seen = time.time()
            if raw.startswith(b"poll "):  # an answer to a leadership poll: not logged
                reply = parse_poll_reply(raw.decode("utf-8", "replace"))
                if reply is not None and candidate.on_poll is not None:
                    candidate.on_poll(reply[0], reply[1], time.monotonic())
                if reply is not None:
                    continue
            out.write(raw)
            out.flush()
            at = parse_lead(system, raw.decode("utf-8", "replace"), seen, lock_name)
            if at is not None:
                leads.add(Lead(candidate.index, at, seen))


@dataclass
class World:
    """What every trial shares: the stores, their forwarders, the namespaces, the tools."""

    timeout_s: float
    workdir: Path
    zk_connect: str  # loopback, for the bench's own checks
    zk_forward: str  # gateway:port, for the candidates
    zk_forward_port: int
    etcd: Etcd
    etcd_forward: str
    etcd_forward_port: int
    net: Any  # devtools.netns.KernelNet
    latch_classpath: str
    java: str
    zk_admin: Any  # a kazoo client on loopback
    zk_pid: int = 0  # the ZooKeeper server's JVM (slow-disk: strace attaches to it)

    def command(self, system: str, index: int, name: str) -> list[str]:
        """The candidate's command line, run in namespace ``index``."""
        host = self.net.hosts[index]
        prefix = [*pdeathsig_prefix(), *host.prefix()]
        t = self.timeout_s
        if system == "this":
            return [
                *prefix, sys.executable, "-m", "nimbus.cli", "serve",
                "--zookeeper", self.zk_forward, "--root", name,
                "--listen", f"{host.address}:{GRPC_PORT}", "--session-timeout", f"{t:g}",
                "--code-dir", str(self.workdir / f"code-{uuid.uuid4().hex[:8]}"),
            ]  # fmt: skip
        if system == "curator":
            return [
                *prefix, self.java, *JVM_FLAGS, "-cp", self.latch_classpath, "PeersLatch",
                self.zk_forward, name, str(round(t * 1000)), f"candidate-{index}",
            ]  # fmt: skip
        if system == "kazoo":
            return [
                *prefix, sys.executable, str(REPO / "bench" / "peers_kazoo.py"),
                self.zk_forward, name, f"{t:g}", f"candidate-{index}",
            ]  # fmt: skip
        if system == "etcd":
            return [
                *prefix, "etcdctl", "--endpoints", self.etcd_forward,
                "lock", f"--ttl={max(1, round(t))}", name,
            ]  # fmt: skip
        raise ValueError(f"unknown system {system!r}")

    def queued(self, system: str, name: str) -> int:
        """Contenders the store holds for this trial's election."""
        if system == "etcd":
            return len(self.etcd.keys(f"{name}/"))
        path = f"{name}/leader-lock" if system == "this" else name
        try:
            return len(self.zk_admin.get_children(path))
        except Exception:  # not there yet (kazoo's NoNodeError and friends)
            return 0

    def store_port(self, system: str) -> int:
        return self.etcd_forward_port if system == "etcd" else self.zk_forward_port

    def store_pid(self, system: str) -> int:
        """The process of the store ``system`` elects on: etcd, or ZooKeeper's JVM."""
        if system == "etcd":
            if self.etcd.proc is None or self.etcd.proc.poll() is not None:
                raise BenchError("etcd is not running")
            return self.etcd.proc.pid
        if not self.zk_pid:
            raise BenchError("no ZooKeeper pid")
        return self.zk_pid

    def timed_write(self, system: str) -> float:
        """Seconds one write to ``system``'s store takes, from the bench on loopback (a
        ZooKeeper ``setData``, an etcd ``put``: both acknowledged after the store's log
        is synced to disk)."""
        value = uuid.uuid4().hex.encode()
        began = time.monotonic()
        try:
            if system == "etcd":
                self.etcd.put(WRITE_CHECK_KEY, value)
            else:
                self.zk_admin.ensure_path(WRITE_CHECK_PATH)
                began = time.monotonic()
                self.zk_admin.set(WRITE_CHECK_PATH, value)
        except Exception as e:  # the store's own error: the trial fails, the bench goes on
            raise BenchError(f"{system}: the timed write failed: {e!r}") from e
        return time.monotonic() - began


@dataclass
class TrialResult:
    round: int
    system: str
    fault: str
    leader: int
    new_leader: int | None
    failover_s: float | None  # fault -> the new leader's "I lead", as reported
    seen_s: float | None  # fault -> the bench read that line
    victim_exit: int | None
    error: str = ""
    #: slow-disk: the fraction of poll rounds with no candidate claiming (the figure).
    leaderless: float | None = None
    #: slow-disk: the write checks, the baseline, rounds, longest stretch and the like.
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def figure(self) -> float | None:
        """The table's number: the leaderless fraction for slow-disk, else the failover."""
        return self.leaderless if self.fault == SLOW_DISK else self.failover_s


class Trial:
    """Three fresh candidates of one system; one fault on the leader; everything killed."""

    #: The candidates' stdin: slow-disk trials write their polls there.
    stdin: int = subprocess.DEVNULL

    def __init__(self, world: World, system: str, fault: str, round_: int) -> None:
        self.world = world
        self.system = system
        self.fault = fault
        self.round = round_
        tag = uuid.uuid4().hex[:10]
        self.name = f"peers-{system}-{tag}" if system == "etcd" else f"/peers-{system}-{tag}"
        self.leads = Leads()
        self.candidates: list[Candidate] = []
        self.cut: int | None = None

    def start(self) -> None:
        order = list(range(CANDIDATES))
        random.shuffle(order)  # who leads first is not always namespace 0
        for index in order:
            log_path = self.world.workdir / f"{self.system}-{self.name.strip('/')}-{index}.log"
            proc = subprocess.Popen(
                self.world.command(self.system, index, self.name),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=self.stdin,
                cwd=REPO,
            )
            candidate = Candidate(index, proc, log_path)
            assert proc.stdout is not None
            candidate.reader = threading.Thread(
                target=read_lines,
                args=(self.system, candidate, proc.stdout, self.leads, self.name.strip("/")),
                daemon=True,
            )
            candidate.reader.start()
            self.candidates.append(candidate)

    def tails(self) -> str:
        return "\n".join(f"--- candidate {c.index}\n{tail(c.log_path)}" for c in self.candidates)

    def wait_ready(self) -> Lead:
        """A leader, three contenders in the store, then SETTLE_S more; the leader."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.leads.wait(lambda lead: True, 0.5) is None:
            dead = [c.index for c in self.candidates if not c.alive()]
            if dead or time.monotonic() > deadline:
                raise BenchError(f"{self.system}: nobody led (exited: {dead})\n{self.tails()}")
        while self.world.queued(self.system, self.name) < CANDIDATES:
            dead = [c.index for c in self.candidates if not c.alive()]
            if dead or time.monotonic() > deadline:
                raise BenchError(
                    f"{self.system}: {self.world.queued(self.system, self.name)} of "
                    f"{CANDIDATES} queued (exited: {dead})\n{self.tails()}"
                )
            time.sleep(0.1)
        time.sleep(SETTLE_S)
        with self.leads.cond:
            leader = self.leads.seen[-1]
        if len(self.leads.seen) != 1:
            log(f"{self.system}: {len(self.leads.seen)} leads before the fault")
        return leader

    def run(self) -> TrialResult:
        try:
            self.start()
            leader = self.wait_ready()
            return self.inject(leader)
        except BenchError as e:
            log(f"{self.system} {self.fault}: {e}")
            return TrialResult(self.round, self.system, self.fault, -1, None, None, None, None,
                               error=str(e).splitlines()[0])  # fmt: skip
        finally:
            self.stop()

    def inject(self, leader: Lead) -> TrialResult:
        victim = next(c for c in self.candidates if c.index == leader.index)
        t = self.world.timeout_s
        cap = 3 * t + 15.0

        def new_leader(lead: Lead) -> bool:
            return lead.index != victim.index and lead.seen_s >= fault_at

        fault_at = time.time()
        if self.fault == "graceful":
            victim.proc.send_signal(signal.SIGTERM)
            lead = self.leads.wait(new_leader, cap)
        elif self.fault == "sigkill":
            victim.proc.send_signal(signal.SIGKILL)
            lead = self.leads.wait(new_leader, cap)
        elif self.fault == "sigstop":
            victim.proc.send_signal(signal.SIGSTOP)
            lead = self.leads.wait(new_leader, PAUSE_FACTOR * t)
            hold = fault_at + PAUSE_FACTOR * t - time.time()
            if hold > 0:
                time.sleep(hold)  # holding the fault is the fault
            victim.proc.send_signal(signal.SIGCONT)
            if lead is None:
                lead = self.leads.wait(new_leader, max(0.0, fault_at + cap - time.time()))
        elif self.fault == "partition":
            self.cut = victim.index
            from devtools.netns import Cut

            self.world.net.cut(
                victim.index, Cut.ZOOKEEPER_BOTH, zookeeper_port=self.world.store_port(self.system)
            )
            lead = self.leads.wait(new_leader, cap)
        else:
            raise ValueError(f"unknown fault {self.fault!r}")
        victim_exit: int | None = None
        if self.fault == "graceful":
            try:
                victim_exit = victim.proc.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log(f"{self.system}: the leader still runs {EXIT_TIMEOUT_S:.0f} s after SIGTERM")
        if lead is None:
            log(f"{self.system} {self.fault}: no new leader {cap:.0f} s after the fault")
            log(self.tails())
            return TrialResult(self.round, self.system, self.fault, victim.index, None, None,
                               None, victim_exit, error="no new leader")  # fmt: skip
        return TrialResult(
            self.round,
            self.system,
            self.fault,
            victim.index,
            lead.index,
            lead.at_s - fault_at,
            lead.seen_s - fault_at,
            victim_exit,
        )

    def stop(self) -> None:
        if self.cut is not None:
            with contextlib.suppress(Exception):
                self.world.net.heal(self.cut)
        for c in self.candidates:
            if c.alive():
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(signal.SIGCONT)
                    c.proc.kill()
        for c in self.candidates:
            try:
                c.proc.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log(f"{self.system}: candidate {c.index} (pid {c.proc.pid}) did not die")
            if c.reader is not None:
                c.reader.join(5)
            for pipe in (c.proc.stdout, c.proc.stdin):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
