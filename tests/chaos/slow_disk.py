"""A slow ZooKeeper disk: every fsync and fdatasync of the server processes delayed.

``FsyncStall`` attaches strace's syscall fault injection to the running JVMs::

    strace -f -e trace=fdatasync,fsync -e inject=fdatasync,fsync:delay_exit=USEC -p PID

and ends it by terminating strace, which detaches and leaves the process as it was. Every
way out stops it: ``stop`` (also from ``with`` and ``finally``), an ``atexit`` hook, and,
for a strace started from the main thread, ``PR_SET_PDEATHSIG`` (``setpriv``); a JVM that
dies takes its strace with it (strace exits when nothing is left to trace).

Only a server that syncs its log has anything to delay: ``ZooKeeperCluster(force_sync=
True)``. With ``forceSync=no`` a write costs no fsync and the stall changes nothing, which
``timed_write`` catches: under the stall a write is acknowledged only after an fsync
(ZooKeeper syncs the log before it answers), so it takes at least the delay.

``stall_figures`` reads a stall out of the leadership polls (``kernel_ensemble.Poll``):
who claimed, and the stretches with no replica claiming, placed against the stall.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NodeExistsError

from cluster.factory import make_kazoo_client
from devtools.lifetime import StopAtExit
from tests.chaos.kernel_ensemble import Poll, double_claims, leaderless

#: How long the stall is held, whatever the delay.
STALL_S = 30.0
#: The name of the rows: ``zk-slow-disk@D`` (D seconds per fsync), optionally followed by
#: ``+FAULT``, a fault on the leader made during the stall (``zk-slow-disk@0.9+sigkill``).
NAME = re.compile(r"^zk-slow-disk@(?P<delay>\d+(?:\.\d+)?)(?:\+(?P<then>.+))?$")
#: ZooKeeper's own word for a slow sync (logged at WARN above ``fsync.warningthresholdms``).
FSYNC_WARNING = re.compile(r"fsync-ing the write ahead log in (\S+) took (\d+)ms")
#: The threshold the benches set with the stall (ZooKeeper's default is 1000 ms), so the
#: log also shows the delays below a second: ``ZooKeeperCluster(extra_config=...)``.
FSYNC_WARNING_CONFIG = "fsync.warningthresholdms=200"


def ensemble_config(session_timeout: float, tick_ms: int = 200) -> tuple[str, ...]:
    """The ensemble's settings for slow-disk rows: the warning threshold, and at long
    sessions ZooKeeper's own default follower deadline (syncLimit 5 x tickTime 2000 =
    10 s) instead of the project's 3 s. With 2 s fsyncs a follower's ACK takes longer than
    3 s, and ZooKeeper's leader drops its followers ("transaction timeout"): the ensemble
    itself loses its quorum and every client its connection, which no client can ride."""
    lines = [FSYNC_WARNING_CONFIG]
    if session_timeout >= 10:
        lines.append(f"syncLimit={-(-10_000 // tick_ms)}")
    return tuple(lines)


#: The node the admin client times its writes on (outside the cluster's root).
PROBE_NODE = "/chaos-slow-disk-probe"
#: The session of that client (seconds).
PROBE_SESSION_S = 30.0


class FsyncStallError(RuntimeError):
    """strace could not attach, or the stall did not slow a write: it did not work."""


@dataclass(frozen=True)
class SlowDisk:
    """A parsed row name: the delay per sync, and the fault on the leader made during it."""

    name: str
    delay: float
    then: str | None = None


def parse(name: str) -> SlowDisk | None:
    """The slow-disk row ``name`` names, or None when it is no slow-disk row."""
    found = NAME.match(name)
    if found is None:
        return None
    delay = float(found["delay"])
    if delay <= 0:
        return None
    return SlowDisk(name, delay, found["then"])


def available() -> str | None:
    """None when the stall can be made here, else why not."""
    if shutil.which("strace") is None:
        return "strace not installed (deploy/local/netfilter.sh installs it)"
    return None


_RUNNING = StopAtExit()


class FsyncStall:
    """Every fsync/fdatasync of ``pids`` (all their threads) delayed by ``delay`` seconds,
    from :meth:`start` to :meth:`stop`. strace's own output goes to ``log_dir``."""

    def __init__(self, pids: Sequence[int], delay: float, log_dir: Path) -> None:
        if not pids:
            raise FsyncStallError("no process to stall")
        if delay <= 0:
            raise ValueError(f"the delay must be > 0, got {delay}")
        self.pids = list(pids)
        self.delay = delay
        self.log_dir = log_dir
        self.started = 0.0  # wall time every strace had attached
        self.stopped = 0.0
        self._procs: list[subprocess.Popen[bytes]] = []
        tag = f"{int(time.time() * 1000)}"
        self._traces = [log_dir / f"strace-{pid}-{tag}.log" for pid in self.pids]
        self._errors = [log_dir / f"strace-{pid}-{tag}.err" for pid in self.pids]

    def command(self, pid: int, trace: Path) -> list[str]:
        usec = round(self.delay * 1e6)
        return [
            "strace", "-f", "-e", "trace=fdatasync,fsync",
            "-e", f"inject=fdatasync,fsync:delay_exit={usec}", "-o", str(trace), "-p", str(pid),
        ]  # fmt: skip

    def start(self, timeout: float = 30.0) -> FsyncStall:
        """Attach to every process; return once each strace says it attached."""
        if available() is not None:
            raise FsyncStallError(str(available()))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _RUNNING.add(self)
        try:
            for pid, trace, errors in zip(self.pids, self._traces, self._errors, strict=True):
                self._procs.append(self._spawn(self.command(pid, trace), errors))
            deadline = time.monotonic() + timeout
            for proc, errors in zip(self._procs, self._errors, strict=True):
                while "attached" not in errors.read_text("utf-8", "replace"):
                    if proc.poll() is not None:
                        raise FsyncStallError(
                            f"strace exited {proc.returncode}: {errors.read_text().strip()}"
                        )
                    if time.monotonic() >= deadline:
                        raise FsyncStallError(f"strace did not attach within {timeout:g} s")
                    time.sleep(0.02)  # strace says so on stderr; nothing else to wait on
        except BaseException:
            self.stop()
            raise
        self.started = time.time()
        return self

    @staticmethod
    def _spawn(command: list[str], errors: Path) -> subprocess.Popen[bytes]:
        setpriv = shutil.which("setpriv")
        # PDEATHSIG fires when the forking *thread* ends: only the main thread lives as
        # long as the process.
        if setpriv is not None and threading.current_thread() is threading.main_thread():
            command = [setpriv, "--pdeathsig", "TERM", "--", *command]
        with errors.open("wb") as err:
            return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=err, stderr=err)

    def stop(self) -> None:
        """Terminate every strace (it detaches); idempotent."""
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._procs and not self.stopped:
            self.stopped = time.time()
        _RUNNING.discard(self)

    def __enter__(self) -> FsyncStall:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for p in self._procs)

    def delayed(self) -> int:
        """How many syncs strace has delayed so far, over every process."""
        return sum(
            p.read_text("utf-8", "replace").count("(DELAYED)") for p in self._traces if p.exists()
        )


def probe_client(hosts: str) -> KazooClient:
    """A started client for :func:`timed_write`, with :data:`PROBE_NODE` made. Its session
    is long (``PROBE_SESSION_S``): kazoo drops a connection whose ping goes unanswered for
    a third of the session, and under the stall pings wait behind the syncs (two of them
    and more on an ensemble), so a 10 s session loses its connection at D = 2 s."""
    client = make_kazoo_client(hosts, session_timeout=PROBE_SESSION_S)
    client.start(timeout=60)
    with contextlib.suppress(NodeExistsError):
        client.create(PROBE_NODE, b"")
    return client


def close_client(client: KazooClient) -> None:
    with contextlib.suppress(Exception):
        client.stop()
        client.close()


def timed_write(client: KazooClient, timeout: float = 120.0, attempts: int = 3) -> float:
    """Seconds one small ``set`` on :data:`PROBE_NODE` took, from send to acknowledgement
    (of the attempt that succeeded: one cut by a lost connection is sent again)."""
    for attempt in range(attempts):
        began = time.monotonic()
        try:
            client.set_async(PROBE_NODE, str(time.time()).encode()).get(timeout=timeout)
        except ConnectionLoss:
            if attempt == attempts - 1:
                raise
            continue
        return time.monotonic() - began
    raise AssertionError("unreachable: the last attempt returns or raises")


def check_stalled(took: float, delay: float, what: str) -> None:
    """Fail loudly when a write under the stall took less than the delay."""
    if took < delay:
        raise FsyncStallError(
            f"{what}: a ZooKeeper write took {took:.3f} s under a {delay:g} s fsync stall: the "
            "injection did not work (is ZooKeeper's forceSync on? strace attached?)"
        )


class LogMark:
    """The fsync warnings ZooKeeper logged after this mark, in its servers' log files."""

    def __init__(self, logs: Sequence[Path]) -> None:
        self._logs = list(logs)
        self._offsets = [p.stat().st_size if p.exists() else 0 for p in self._logs]

    def fsync_warnings(self) -> list[int]:
        """Milliseconds of every slow sync logged since the mark."""
        found: list[int] = []
        for path, offset in zip(self._logs, self._offsets, strict=True):
            if not path.exists():
                continue
            with path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode("utf-8", "replace")
            found += [int(m.group(2)) for m in FSYNC_WARNING.finditer(text)]
        return found


# -- the stall, as the leadership polls saw it -----------------------------------------------


def start_window(delay: float) -> float:
    """Seconds from the stall's start within which a stretch with no claim counts as "at
    the start": the first slow beats are answered after about two syncs."""
    return max(1.0, 2 * delay)


def stall_figures(
    rounds: Sequence[Poll], begin: float, end: float, until: float, delay: float
) -> dict[str, Any]:
    """Leadership through a stall from ``begin`` to ``end`` and its aftermath to ``until``
    (all on the polls' clock, ``time.monotonic``).

    - ``rounds_during``, ``no_claim_fraction_during``: poll rounds during the stall, and
      the fraction of them in which no replica claimed;
    - ``longest_no_claim_s``: the longest stretch with no replica claiming that overlaps
      the stall or its aftermath (``kernel_ensemble.leaderless``), ``longest_from_s`` where
      it began, seconds from the stall's start, and the answers in it;
    - ``longest_at_start_s`` / ``longest_after_start_s``: the longest stretch that began
      within ``start_window(delay)`` of the stall's start, and the longest that began later;
      ``longest_is_at_start``: whether the longest of all is the former;
    - ``no_claim_stretches``: how many stretches, ``epochs_claimed``: the epochs claimed in
      the window in order, ``double_claims``: rounds with two claiming.
    """
    lead_in = [p for p in rounds if p.at < begin and p.claims]
    window = [p for p in rounds if begin <= p.at <= until]
    if lead_in:  # from the last claim before the stall, so a stretch starting with it shows
        window = [lead_in[-1], *window]
    during = [p for p in window if begin <= p.at <= end]
    stretches = [(a, b) for a, b in leaderless(window) if b >= begin]
    edge = begin + start_window(delay)
    at_start = [b - a for a, b in stretches if a < edge]
    after = [b - a for a, b in stretches if a >= edge]
    figures: dict[str, Any] = {
        "rounds_during": len(during),
        "no_claim_fraction_during": (
            round(sum(1 for p in during if not p.claims) / len(during), 3) if during else None
        ),
        "longest_no_claim_s": 0.0,
        "longest_from_s": None,
        "longest_answers": {},
        "longest_at_start_s": round(max(at_start), 2) if at_start else 0.0,
        "longest_after_start_s": round(max(after), 2) if after else 0.0,
        "longest_is_at_start": bool(at_start) and max(at_start) >= max(after, default=0.0),
        "start_window_s": round(edge - begin, 2),
        "no_claim_stretches": len(stretches),
        "epochs_claimed": _epochs_in_order(window),
        "double_claims": double_claims(window)[:5],
    }
    if stretches:
        since, to = max(stretches, key=lambda s: s[1] - s[0])
        said = Counter(p.answers for p in window if since < p.at < to)
        figures.update(
            longest_no_claim_s=round(to - since, 2),
            longest_from_s=round(since - begin, 2),
            longest_answers=dict(said.most_common(4)),
        )
    return figures


def _epochs_in_order(rounds: Sequence[Poll]) -> list[int]:
    seen: list[int] = []
    for p in rounds:
        for epoch in sorted(set(p.claims.values())):
            if not seen or epoch > seen[-1]:
                seen.append(epoch)
    return seen


def first_claim_after(
    rounds: Sequence[Poll], after: float, *, above_epoch: int = 0, replica: int | None = None
) -> float | None:
    """Seconds from ``after`` to the first round in which ``replica`` (any, when None)
    claimed an epoch above ``above_epoch``; None when none did."""
    for p in rounds:
        if p.at < after:
            continue
        if any(
            epoch > above_epoch and (replica is None or i == replica)
            for i, epoch in p.claims.items()
        ):
            return round(p.at - after, 3)
    return None
