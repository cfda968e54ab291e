"""Data-plane fencing with real processes: a leader, two supervisors, Spark workers.

One test walks one word-count topology through four data-plane faults, in turn, on
one shared checkpoint folder (each Spark start costs about 7 s, so they share a run):

1. SIGKILL the supervisor and restart it: it adopts its running worker, none is added.
2. SIGKILL the supervisor for good: its orphaned worker runs until the leader moves the
   slot, then stops; the new worker claims only after the old claim is gone.
3. SIGSTOP the new worker's process group past its session timeout: the slot moves; after
   SIGCONT the paused worker publishes nothing more and exits.
4. Cut the supervisor holding the slot, and its worker, off from ZooKeeper through a
   fault proxy: the worker publishes nothing more and stops; another worker takes over.
5. Deactivate the topology: the worker stops its query and keeps its claim; activated,
   it resumes from the checkpoint.

After each step the word counts are exact. A watcher records the claim's history from
ZooKeeper (each claim's czxid and the zxid at which it went), and the checker proves no
two claims overlapped and every commit marker lies inside its own claim's lifetime.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cluster.api import records
from cluster.paths import Paths
from devtools.faultproxy import FaultProxy
from pipeline.adopt import RECORD
from tests.cluster import REPO, wait_for_agreed_leader
from tests.processes import cli_submit, cli_topology_id, nimbus_cli, stop_process
from tests.replica_fixtures import ROOT, Spawn, sync_flags
from tests.supervisors import Command
from tests.test_workers import add_input, alive, corpus, counted, output_counts, wordcount_package
from tests.waiting import wait_until

PATHS = Paths(ROOT)
# Supervisors' and workers' ZooKeeper sessions: a SIGKILLed supervisor must be back
# within one (it takes seconds to start on a loaded machine) or its node goes.
SESSION = 8.0
SILENCE = 15.0  # the leader moves a slot whose worker or supervisor was silent this long
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\d+) ")


class Supervisor:
    """One ``nimbus supervisor`` process (``command``: the ``supervisor_command``
    fixture); restartable with the same id and state."""

    def __init__(
        self, command: Command, sid: str, zookeeper: str, tmp: Path, checkpoints: Path
    ) -> None:
        self.command = command
        self.id = sid
        self.zookeeper = zookeeper
        self.state = tmp / sid
        self.log = tmp / f"{sid}.log"
        self.checkpoints = checkpoints
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Supervisor:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    *self.command, "--zookeeper", self.zookeeper,
                    "--root", ROOT, "--id", self.id, "--host", "127.0.0.1", "--slots", "1",
                    "--heartbeat-interval", "0.5", "--session-timeout", str(SESSION),
                    "--state-dir", str(self.state), "--checkpoint-dir", str(self.checkpoints),
                    "--worker-stop-timeout", "600", "--log-level", "INFO",
                ],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
            )  # fmt: skip
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def worker_pid(self) -> int | None:
        """The pid in the supervisor's record of its (last started) worker."""
        for record in self.state.glob(f"workers/*/{RECORD}"):
            return int(json.loads(record.read_text())["pid"])
        return None

    def live_worker(self) -> int | None:
        pid = self.worker_pid()
        return pid if pid is not None and alive(pid) else None

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class ClaimHistory:
    """Every claim of the slot seen by a watch: (czxid, epoch, pid) and when it went."""

    claims: list[tuple[int, int, int]] = field(default_factory=list)
    ended: dict[int, int] = field(default_factory=dict)  # czxid -> zxid it was gone at
    lock: threading.Lock = field(default_factory=threading.Lock)

    def watch(self, zk: KazooClient, tid: str) -> None:
        folder, claim = PATHS.claims_of(tid), PATHS.claim(tid, 0)
        zk.ensure_path(folder)

        def on_children(children: list[str]) -> None:
            try:
                data, stat = zk.get(claim)
                epoch = zk.exists(folder)
            except NoNodeError:
                data, stat, epoch = b"", None, None
            parent = zk.exists(folder)
            with self.lock:
                current = self.claims[-1][0] if self.claims else 0
                gone = stat is None or stat.czxid != current
                if current and current not in self.ended and gone:
                    assert parent is not None
                    # pzxid: the zxid of the last change of the folder's children, the
                    # deletion when nothing was created since (asserted by the checker).
                    self.ended[current] = parent.pzxid if stat is None else stat.czxid
                if stat is not None and stat.czxid != current:
                    assert epoch is not None and epoch.mzxid == stat.czxid, "one multi-op"
                    pid = records.WorkerClaim.FromString(data).pid
                    self.claims.append((stat.czxid, epoch.version, pid))

        zk.ChildrenWatch(folder, on_children)

    def holders(self) -> list[int]:
        with self.lock:
            return [pid for _, _, pid in self.claims]

    def check(self, zk: KazooClient, tid: str) -> list[tuple[int, int]]:
        """No two claims overlap; every marker lies inside its claim. Returns markers."""
        with self.lock:
            claims, ended = list(self.claims), dict(self.ended)
        for (czxid, epoch, pid), (next_czxid, next_epoch, _) in itertools.pairwise(claims):
            assert czxid in ended, f"claim {czxid} of pid {pid} never ended"
            assert czxid < ended[czxid] <= next_czxid, "a claim began before the last ended"
            assert next_epoch > epoch
        lifetime = {epoch: (czxid, ended.get(czxid, 1 << 62)) for czxid, epoch, _ in claims}
        markers: list[tuple[int, int]] = []
        for name in zk.get_children(PATHS.commits_of(tid)):
            data, stat = zk.get(f"{PATHS.commits_of(tid)}/{name}")
            commit = records.BatchCommit.FromString(data)
            start, end = lifetime[commit.claim_epoch]
            assert start < stat.czxid < end, f"batch {commit.batch_id} committed outside its claim"
            markers.append((commit.batch_id, commit.claim_epoch))
        return sorted(markers)


def log_lines(path: Path, pid: int, needle: str) -> list[datetime]:
    """Times of the worker ``pid``'s log lines containing ``needle``."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        m = LOG_TIME.match(line)
        if m and int(m.group(2)) == pid and needle in line:
            found.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f"))
    return found


def worker_log(sup: Supervisor, tid: str) -> Path:
    return sup.state / "workers" / tid / "worker.log"


@pytest.mark.timeout(1800)  # four Spark starts: minutes on an idle machine, far more if busy
def test_workers_of_a_moved_slot_never_overlap_and_counts_stay_exact(
    spawn: Spawn,
    supervisor_command: Command,
    zk_server: object,
    zk_hosts: str,
    zk_client: KazooClient,
    tmp_path: Path,
) -> None:
    inbox, out, checkpoints = tmp_path / "input", tmp_path / "output", tmp_path / "checkpoints"
    inbox.mkdir()
    package = wordcount_package(tmp_path, inbox, out)
    parts = [corpus(10 + i, 1500) for i in range(6)]
    fed: list[str] = []

    def feed(i: int) -> None:
        add_input(inbox, f"part-{i}.txt", parts[i])
        fed.extend(parts[i])

    def counts_exact(what: str) -> None:
        wait_until(
            lambda: output_counts(out) == counted(fed), timeout=300, interval=0.5, message=what
        )

    host, port = zk_server.connect_string.split(",")[0].split(":")  # type: ignore[attr-defined]
    chroot = zk_hosts[zk_hosts.index("/") :]
    proxy = FaultProxy(host, int(port)).start()
    timing = ("--heartbeat-timeout", str(SILENCE), "--schedule-interval", "0.5")
    replica = spawn(extra=(*sync_flags(min_replicas=1, replicas=1), *timing))
    via_proxy = f"{proxy.address}{chroot}"
    a = Supervisor(supervisor_command, "sup-a", via_proxy, tmp_path, checkpoints)
    b = Supervisor(supervisor_command, "sup-b", zk_hosts, tmp_path, checkpoints)
    history = ClaimHistory()
    stopped: list[int] = []
    try:
        a.start()
        wait_for_agreed_leader([replica], timeout=30)
        wait_until(lambda: zk_client.exists(PATHS.supervisor("sup-a")), timeout=30)
        feed(0)
        cli_submit(package, "wordcount", replica.address)
        tid = cli_topology_id("wordcount", replica.address)
        history.watch(zk_client, tid)
        counts_exact("the first part counted")
        w1 = a.live_worker()
        assert w1 is not None and history.holders() == [w1]
        b.start()

        # 1. Supervisor SIGKILLed and restarted: it adopts the worker, starts no other.
        a.kill()
        a.start()
        wait_until(lambda: "adopted the running worker" in a.text(), timeout=30)
        feed(1)
        counts_exact("the second part counted by the adopted worker")
        assert a.worker_pid() == w1 and alive(w1)
        assert history.holders() == [w1]
        assert b.worker_pid() is None, "no worker may start for the slot elsewhere"

        # 2. Supervisor SIGKILLed for good: the orphan stops once the slot moves to sup-b.
        a.kill()
        assert alive(w1), "the worker outlives its supervisor"
        w2 = wait_until(b.live_worker, timeout=240, message="sup-b's worker")
        assert w2 is not None
        wait_until(lambda: len(history.holders()) == 2, timeout=240, message="sup-b's claim")
        assert history.holders() == [w1, w2]
        wait_until(lambda: not alive(w1), timeout=240, message="the orphaned worker to exit")
        history.check(zk_client, tid)  # the new claim began after the old one ended
        feed(2)
        counts_exact("the third part counted by the new worker")

        # 3. SIGSTOP sup-b's worker past its session: the slot moves back to sup-a.
        a.start()
        os.killpg(w2, signal.SIGSTOP)
        stopped.append(w2)
        wait_until(lambda: len(history.holders()) == 3, timeout=240, message="sup-a's claim")
        w3 = history.holders()[2]
        assert w3 == a.live_worker()
        resumed = time.monotonic()
        os.killpg(w2, signal.SIGCONT)
        stopped.remove(w2)
        wait_until(lambda: not alive(w2), timeout=240, message="the resumed worker to exit")
        exit_after = time.monotonic() - resumed
        feed(3)
        counts_exact("the fourth part counted by the worker that took over")
        history.check(zk_client, tid)  # the paused worker committed nothing outside its claim

        # 4. Cut sup-a and its worker off from ZooKeeper: the worker stops, sup-b takes over.
        cut = time.monotonic()
        proxy.blackhole()
        wait_until(lambda: not alive(w3), timeout=240, message="the cut-off worker to exit")
        cut_exit_after = time.monotonic() - cut
        wait_until(lambda: len(history.holders()) == 4, timeout=240, message="sup-b's new claim")
        w4 = history.holders()[3]
        assert w4 == b.live_worker()
        history.check(zk_client, tid)  # the cut-off worker's commits stayed in its claim
        feed(4)
        counts_exact("the last part counted after the cut")

        # 5. Deactivated: the query stops, the claim stays; activated: it resumes.
        done = nimbus_cli("deactivate", "wordcount", "--seeds", replica.address)
        assert done.returncode == 0, done.stderr
        paused = wait_until(
            lambda: log_lines(worker_log(b, tid), w4, "deactivated, query stopped"), timeout=240
        )[0]
        feed(5)
        done = nimbus_cli("activate", "wordcount", "--seeds", replica.address)
        assert done.returncode == 0, done.stderr
        counts_exact("input added while inactive counted once activated")
        restarted = [t for t in log_lines(worker_log(b, tid), w4, "query started") if t > paused]
        assert restarted, "the same worker resumed its query"
        idle = [t for t in log_lines(worker_log(b, tid), w4, "committed out") if t < restarted[0]]
        assert not [t for t in idle if t > paused], "nothing is published while inactive"
        assert history.holders() == [w1, w2, w3, w4] and alive(w4)

        markers = history.check(zk_client, tid)
        epochs = [epoch for _, epoch in markers]
        assert epochs == sorted(epochs), "commits of the claims interleave"
        assert len({epoch for epoch in epochs}) >= 3
        print(
            f"\nholders {history.holders()}; resumed worker exited {exit_after:.1f}s after "
            f"SIGCONT, cut-off worker {cut_exit_after:.1f}s after the cut; "
            f"{len(markers)} commits"
        )
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)
        proxy.pass_through()
        proxy.reset()  # discarded bytes leave torn streams: drop them, as a real cut would
        for sup in (a, b):
            if sup.proc is not None:
                stop_process(sup.proc, 60)
        for sup in (a, b):  # workers left behind by a killed supervisor
            left = sup.live_worker()
            if left is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(left, signal.SIGKILL)
        proxy.stop()
