"""Side by side with the peers: the same faults on the leader of four election systems.

One ZooKeeper and one etcd on this machine; three candidates of each system at the same
session timeout / lease TTL ``T`` (20 s by default, Storm's; ``--timeout`` for others):

* ``this``: three ``nimbus serve`` replicas with their default settings; a replica leads
  from its ``took office`` log line (the time in that line);
* ``curator``: Curator's ``LeaderLatch`` (what Storm and Spark use), a small Java program
  (``bench/peers_java/PeersLatch.java``) compiled here with ``javac`` against the PySpark
  wheel's Curator 5.9.0 and ZooKeeper 3.9.5 jars; it prints ``I lead <epoch ms>``;
* ``kazoo``: kazoo's ``Election`` recipe (``bench/peers_kazoo.py``), the same line;
* ``etcd``: ``etcdctl lock --ttl T`` (a session on a lease of ``T`` seconds), which prints
  the lock's key when it holds it (the time the bench reads that line).

Every candidate runs in a network namespace of its own, joined to the host by a veth pair
on a bridge (``devtools.netns``), and reaches its store through a plain forwarder on the
bridge address (ZooKeeper and etcd listen on loopback only). Faults on the current
leader: ``graceful`` (SIGTERM: each system's own close), ``sigkill``, ``sigstop`` (held for
1.5 T, then SIGCONT) and ``partition`` (iptables in the leader's namespace drops its
packets to and from the store, until a new leader is in). The figure: from the fault to
the new leader's first "I lead", as that system reports it. Each trial starts three fresh
candidates on a fresh path, waits until all three are queued in the store and the leader
has led for a few seconds, injects the fault, and kills whatever is left.

``--quick``: one trial per fault and system; the full run: ``--trials`` (5) rounds,
interleaved (round i of every system and fault before round i + 1, the systems' order
rotated each round) so noise hits all alike. Needs root (namespaces, iptables), Java 17
and etcd 3.4 (Debian's ``etcd-server`` and ``etcd-client``, installed with apt-get when
missing). Logs on stderr; a table and, last, one JSON line on stdout:
``{"timeout_s": 20, "rows": {"this": {"graceful": s, ...}, "curator": ..., ...}, ...}``
(p50 seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from _common import (
    REPO,
    BenchError,
    exit_on_sigterm,
    format_table,
    free_port,
    load_1min,
    machine_facts,
    pdeathsig_prefix,
    percentile,
)

SYSTEMS = ("this", "curator", "kazoo", "etcd")
FAULTS = ("graceful", "sigkill", "sigstop", "partition")
DEFAULT_TIMEOUT_S = 20.0  # Storm's storm.zookeeper.session.timeout
FULL_TRIALS = 5
CANDIDATES = 3
GRPC_PORT = 6627
SETTLE_S = 3.0  # after all three are queued: the leader's successor watches it a while
PAUSE_FACTOR = 1.5  # SIGSTOP held for 1.5 T
START_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 30.0
CURATOR_JARS = (
    "curator-client-",
    "curator-framework-",
    "curator-recipes-",
    "zookeeper-3",
    "zookeeper-jute-",
    "guava-",
    "failureaccess-",
    "slf4j-api-",
    "log4j-api-",
    "log4j-core-",
    "log4j-slf4j2-impl-",
    "netty-",  # ZooKeeper's client names netty's SSL classes even on its NIO socket
)
JVM_FLAGS = ("-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
# Packages whose uncommitted changes would be part of what "this" measures.
THIS_PACKAGES = ("cluster/", "fencing/", "leader/", "code_sync/", "nimbus/", "pipeline/")

_TOOK_OFFICE = re.compile(r": took office, epoch \d+")


def log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- pure parts (tests/test_peers_bench.py) ---------------------------------------------


def schedule(
    systems: Sequence[str], faults: Sequence[str], trials: int
) -> list[tuple[int, str, str]]:
    """``(round, fault, system)`` in run order: round i of every fault and system before
    round i + 1, the systems' order rotated by one each round (no system always first)."""
    order: list[tuple[int, str, str]] = []
    for i in range(trials):
        shift = i % len(systems) if systems else 0
        rotated = [*systems[shift:], *systems[:shift]]
        for fault in faults:
            for system in rotated:
                order.append((i, fault, system))
    return order


def parse_lead(system: str, line: str, seen_s: float, lock_name: str = "") -> float | None:
    """When ``line`` (one line of a candidate's output) says it leads: the time it gives
    (Unix seconds), else ``seen_s`` for a system whose line has none (etcdctl prints the
    lock's key). None for any other line."""
    text = line.strip()
    if system in ("curator", "kazoo"):
        if text.startswith("I lead "):
            return int(text.split()[2]) / 1000.0
        return None
    if system == "etcd":
        return seen_s if lock_name and text.startswith(f"{lock_name}/") else None
    if system == "this":
        if "took office" not in text:
            return None
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(record, dict) or not _TOOK_OFFICE.search(str(record.get("message"))):
            return None
        stamp = datetime.strptime(str(record["time"]), "%Y-%m-%d %H:%M:%S,%f")
        return stamp.timestamp()  # asctime is local time, as is this process's
    raise ValueError(f"unknown system {system!r}")


def rows_p50(
    figures: dict[str, dict[str, list[float | None]]],
) -> dict[str, dict[str, float | None]]:
    """p50 seconds (3 decimals) of each system and fault over its completed trials."""
    rows: dict[str, dict[str, float | None]] = {}
    for system, by_fault in figures.items():
        rows[system] = {}
        for fault, values in by_fault.items():
            done = [v for v in values if v is not None]
            rows[system][fault] = round(percentile(done, 50), 3) if done else None
    return rows


def best_peer(rows: dict[str, dict[str, float | None]], fault: str) -> tuple[str, float] | None:
    """The fastest system other than ``this`` on ``fault``: (name, p50 s)."""
    peers = [(v, name) for name, row in rows.items() if name != "this" if (v := row.get(fault))]
    if not peers:
        return None
    value, name = min(peers)
    return name, value


def format_cell(values: Sequence[float | None]) -> str:
    """``p50`` of the completed trials, with ``(min-max)`` when there are several and
    ``k failed`` when some trials saw no new leader."""
    done = sorted(v for v in values if v is not None)
    failed = len(values) - len(done)
    if not done:
        return "no leader" if values else "-"
    text = f"{percentile(done, 50):.3f}"
    if len(done) > 1:
        text += f" ({done[0]:.3f}-{done[-1]:.3f})"
    if failed:
        text += f" {failed} failed"
    return text


def results_table(figures: dict[str, dict[str, list[float | None]]], faults: Sequence[str]) -> str:
    """Systems down, faults across; each cell the p50 seconds (min-max) of its trials,
    then a row per fault with ``this`` over the best peer."""
    headers = ["system", *(f"{f} s" for f in faults)]
    body: list[list[object]] = [
        [system, *(format_cell(by_fault.get(f, [])) for f in faults)]
        for system, by_fault in figures.items()
    ]
    rows = rows_p50(figures)
    if "this" in rows:
        ratios: list[object] = ["this / best peer"]
        for fault in faults:
            best = best_peer(rows, fault)
            mine = rows["this"].get(fault)
            ratios.append(
                f"{mine / best[1]:.3f} ({best[0]})"
                if best is not None and mine is not None
                else "-"
            )
        body.append(ratios)
    return format_table(headers, body)


def result_json(
    timeout_s: float,
    figures: dict[str, dict[str, list[float | None]]],
    **extra: Any,
) -> dict[str, Any]:
    """The last line's object: ``timeout_s`` and ``rows`` (p50 s) first, then the rest."""
    per_trial = {
        system: {fault: [None if v is None else round(v, 4) for v in values]
                 for fault, values in by_fault.items()}
        for system, by_fault in figures.items()
    }  # fmt: skip
    return {
        "timeout_s": int(timeout_s) if float(timeout_s).is_integer() else timeout_s,
        "rows": rows_p50(figures),
        "per_trial_s": per_trial,
        **extra,
    }


# -- the stores -------------------------------------------------------------------------


def run_quiet(argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


def ensure_etcd() -> None:
    """Debian's etcd 3.4 (``etcd-server``, ``etcd-client``), installed when missing."""
    if shutil.which("etcd") and shutil.which("etcdctl"):
        return
    log("etcd missing: apt-get install -y etcd-server etcd-client")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "etcd-server", "etcd-client"]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise BenchError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    if not (shutil.which("etcd") and shutil.which("etcdctl")):
        raise BenchError("etcd-server / etcd-client installed, but no etcd or etcdctl on PATH")


def first_line(argv: Sequence[str]) -> str:
    try:
        done = run_quiet(argv)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


class Etcd:
    """One etcd member on loopback, its data in a temp folder."""

    def __init__(self, workdir: Path) -> None:
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = workdir / "etcd-data"
        self.log_path = workdir / "etcd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self) -> Etcd:
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://{self.endpoint}"
        cmd = [
            *pdeathsig_prefix(), "etcd", "--name", "peers", "--data-dir", str(self.data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"peers={peer}", "--logger", "zap", "--log-level", "warn",
        ]  # fmt: skip
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"etcd exited with {self.proc.returncode}: {tail(self.log_path)}")
            if self.ctl("endpoint", "health").returncode == 0:
                return self
            time.sleep(0.2)
        raise BenchError(f"etcd not healthy in {START_TIMEOUT_S:.0f} s: {tail(self.log_path)}")

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_quiet(["etcdctl", "--endpoints", self.endpoint, *args])

    def keys(self, prefix: str) -> list[str]:
        done = self.ctl("get", "--prefix", prefix, "--keys-only")
        return [k for k in done.stdout.split() if k] if done.returncode == 0 else []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise BenchError("pyspark is not installed: its wheel's jars hold Curator")
    return Path(spec.origin).parent / "jars"


def curator_classpath(jars_dir: Path) -> list[Path]:
    jars = sorted(jars_dir.glob("*.jar"))
    picked = [j for j in jars if j.name.startswith(CURATOR_JARS)]
    for prefix in ("curator-recipes-", "zookeeper-3"):
        if not any(j.name.startswith(prefix) for j in picked):
            raise BenchError(f"no {prefix}*.jar in {jars_dir}")
    return picked


def compile_latch(workdir: Path) -> str:
    """Compile PeersLatch.java into ``workdir/classes``; the classpath to run it with."""
    jars = curator_classpath(pyspark_jars())
    classes = workdir / "classes"
    classes.mkdir()
    source = REPO / "bench" / "peers_java" / "PeersLatch.java"
    cp = ":".join(str(j) for j in jars)
    done = run_quiet(["javac", "-d", str(classes), "-cp", cp, str(source)], timeout=300)
    if done.returncode != 0:
        raise BenchError(f"javac failed: {done.stderr.strip()}")
    return f"{cp}:{classes}"


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


class Trial:
    """Three fresh candidates of one system; one fault on the leader; everything killed."""

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
                stdin=subprocess.DEVNULL,
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
            if c.proc.stdout is not None:
                c.proc.stdout.close()


# -- the run ----------------------------------------------------------------------------


def free_subnet() -> str:
    """A 10.78.x.0/24 no route of this machine uses (the kernel tests use 10.77.0)."""
    routes = run_quiet(["ip", "-4", "route"]).stdout
    for third in random.sample(range(10, 250), 240):
        subnet = f"10.78.{third}"
        if f"{subnet}." not in routes:
            return subnet
    raise BenchError("no free 10.78.x.0/24 subnet")


def git_facts() -> dict[str, Any]:
    head = run_quiet(["git", "-C", str(REPO), "rev-parse", "HEAD"]).stdout.strip()
    status = run_quiet(["git", "-C", str(REPO), "status", "--porcelain"]).stdout.splitlines()
    dirty = sorted(
        line[3:] for line in status if line[3:].startswith(THIS_PACKAGES) and line[:2] != "??"
    )
    return {"commit": head, "uncommitted_in_this": dirty}


def run(
    *,
    timeout_s: float,
    trials: int,
    systems: Sequence[str],
    faults: Sequence[str],
    quick: bool,
    keep_logs: bool = False,
) -> dict[str, Any]:
    from kazoo.client import KazooClient

    from devtools.faultproxy import FaultProxy
    from devtools.netns import KernelNet, available
    from devtools.zkserver import ZooKeeperCluster, find_java, srvr

    why_not = available()
    if why_not is not None:
        raise BenchError(f"kernel partitions need root, ip and iptables: {why_not}")
    if "etcd" in systems:
        ensure_etcd()
    began = time.monotonic()
    load_start = load_1min()
    facts = machine_facts()
    git = git_facts()
    log(f"measuring {', '.join(systems)} at T = {timeout_s:g} s, commit {git['commit'][:12]}")
    if git["uncommitted_in_this"]:
        log(f"uncommitted changes measured with 'this': {git['uncommitted_in_this']}")
    workdir = Path(tempfile.mkdtemp(prefix="nimbus-bench-peers-"))
    results: list[TrialResult] = []
    ok = False
    with contextlib.ExitStack() as stack:
        try:
            net = KernelNet(CANDIDATES, subnet=free_subnet())
            stack.callback(net.teardown)
            net.setup()
            zk = stack.enter_context(
                ZooKeeperCluster(size=1, max_session_timeout_ms=max(60_000, int(4000 * timeout_s)))
            )
            zk_port = zk.client_ports[0]
            zk_forwarder = FaultProxy("127.0.0.1", zk_port, listen_host=net.gateway).start()
            stack.callback(zk_forwarder.stop)
            etcd = Etcd(workdir)
            stack.callback(etcd.stop)
            etcd_forward_port = 0
            if "etcd" in systems:
                etcd.start()
                etcd_forwarder = FaultProxy(
                    "127.0.0.1", etcd.client_port, listen_host=net.gateway
                ).start()
                stack.callback(etcd_forwarder.stop)
                etcd_forward_port = etcd_forwarder.port
            admin = KazooClient(hosts=zk.connect_string, timeout=30.0)
            admin.start(timeout=60)
            stack.callback(admin.close)
            stack.callback(admin.stop)
            java = find_java()
            world = World(
                timeout_s=timeout_s,
                workdir=workdir,
                zk_connect=zk.connect_string,
                zk_forward=f"{net.gateway}:{zk_forwarder.port}",
                zk_forward_port=zk_forwarder.port,
                etcd=etcd,
                etcd_forward=f"{net.gateway}:{etcd_forward_port}",
                etcd_forward_port=etcd_forward_port,
                net=net,
                latch_classpath=compile_latch(workdir) if "curator" in systems else "",
                java=java,
                zk_admin=admin,
            )
            plan = schedule(systems, faults, trials)
            for n, (round_, fault, system) in enumerate(plan, 1):
                result = Trial(world, system, fault, round_).run()
                results.append(result)
                figure = "-" if result.failover_s is None else f"{result.failover_s:.3f} s"
                log(
                    f"{n}/{len(plan)} round {round_ + 1} {system:8s} {fault:9s}: {figure} "
                    f"(read {result.seen_s if result.seen_s is None else round(result.seen_s, 3)})"
                    f" leader ns {result.leader} -> {result.new_leader}"
                    + (f" exit {result.victim_exit}" if result.fault == "graceful" else "")
                    + (f" [{result.error}]" if result.error else "")
                )
            zk_version = "unknown"
            for line in (srvr(zk_port, timeout=5.0) or "").splitlines():
                if line.startswith("Zookeeper version:"):
                    zk_version = line.partition(":")[2].split("-")[0].split(",")[0].strip()
            ok = True
        finally:
            if not ok or keep_logs:
                log(f"candidate logs kept in {workdir}")
    if not keep_logs:
        shutil.rmtree(workdir, ignore_errors=True)

    figures: dict[str, dict[str, list[float | None]]] = {
        s: {f: [r.failover_s for r in results if r.system == s and r.fault == f] for f in faults}
        for s in systems
    }
    versions = {
        "zookeeper": zk_version,
        "curator": "5.9.0 (the PySpark wheel's jars)",
        "kazoo": importlib.metadata.version("kazoo"),
        "etcd": first_line(["etcd", "--version"]) if "etcd" in systems else "not run",
        "java": facts.java,
    }
    load_end = load_1min()
    elapsed = time.monotonic() - began
    mode = "quick" if quick else "full"
    print(
        f"side by side with the peers ({mode}, {trials} trial(s) per cell, interleaved): "
        f"failover in seconds from the fault on the leader to the new leader's first "
        f"'I lead', 3 candidates each, T = {timeout_s:g} s (session timeout / lease TTL)"
    )
    print(
        f"ZooKeeper {zk_version} (one server, tickTime 200 ms), etcd {versions['etcd']}, "
        f"kazoo {versions['kazoo']}, Curator 5.9.0; commit {git['commit'][:12]}"
    )
    print()
    table = results_table(figures, faults)
    print(table)
    print()
    print(
        "cells: p50 (min-max) over the trials; graceful = SIGTERM (each system's own close); "
        f"sigstop held {PAUSE_FACTOR:g} T; partition = the leader's packets to and from its "
        "store dropped in its network namespace"
    )
    print(facts.line())
    print(
        f"load average (1 min) {load_start:.2f} at start, {load_end:.2f} at end; "
        f"wall time {elapsed:.0f} s"
    )
    return result_json(
        timeout_s,
        figures,
        benchmark="peers",
        quick=quick,
        trials=trials,
        order=[f"{r + 1}:{f}:{s}" for r, f, s in schedule(systems, faults, trials)],
        table=table.splitlines(),
        trial_details=[asdict(r) for r in results],
        versions=versions,
        git=git,
        machine=facts.as_dict(),
        load_1min_start=round(load_start, 2),
        load_1min_end=round(load_end, 2),
        wall_s=round(elapsed, 1),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one trial per fault and system")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"session timeout / lease TTL in seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--trials", type=int, default=FULL_TRIALS, help=f"rounds of the full run ({FULL_TRIALS})"
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="comma-separated subset of " + ",".join(SYSTEMS),
    )
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help="comma-separated subset of " + ",".join(FAULTS)
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep every candidate's log (a temp folder)"
    )
    args = parser.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    faults = [f for f in args.faults.split(",") if f]
    unknown = sorted(set(systems) - set(SYSTEMS)) + sorted(set(faults) - set(FAULTS))
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    if args.trials < 1:
        parser.error("--trials must be >= 1")
    exit_on_sigterm()
    result = run(
        timeout_s=args.timeout,
        trials=1 if args.quick else args.trials,
        systems=systems,
        faults=faults,
        quick=args.quick,
        keep_logs=args.keep_logs,
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
