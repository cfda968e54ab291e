"""bench/peers.py's ``slow-disk`` column: every fsync of the store takes 0.9 s for a while;
the figure is the fraction of leadership poll rounds in which no candidate claims to lead.

The delay: strace's syscall fault injection on the running store process (ZooKeeper's JVM
for ``this``, Curator and kazoo; etcd for etcd), every thread, ``fdatasync`` and ``fsync``
held for ``delay_s`` on their way out (ZooKeeper's transaction log syncs with
``FileChannel.force(false)``, fdatasync; etcd's WAL and bbolt with fdatasync). A timed
write to the store must take ``delay_s`` or more right after strace attaches and again at
the end, or the trial fails: the fault was not on. strace is terminated (it detaches) in
every case.

The polls: every ``POLL_S`` every candidate is asked whether it leads, each answer due
within ``ANSWER_S`` (nimbus's client asks each seed with that deadline when it looks for
the leader). Rounds go out on a fixed clock, whether or not the earlier ones were answered,
so a fraction of rounds is a fraction of the time:

* ``this``: ``GetLeaderAddress`` over gRPC to each replica, with the project's client
  channel options; a claim is ``responder_is_leader``;
* ``curator``: ``poll N`` on the candidate's stdin, answered from ``LeaderLatch.hasLeadership``;
* ``kazoo``: the same, answered "leads" while the Election's function runs and the client
  is connected (a suspended or lost session is no claim: what kazoo's docs ask of a leader);
* ``etcd``: ``etcdctl lock`` prints its key once it holds the lock and exits when its
  session ends; a claim is "printed the key and still running" (asked of the bench's own
  record: etcdctl answers nothing).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from _common import BenchError, pdeathsig_prefix
from _peers_figures import (
    SLOW_DISK,
    Answer,
    PollRound,
    answered_rounds,
    claimants,
    double_claims,
    in_window,
    leaderless_fraction,
    leaderless_stretches,
    longest_leaderless_s,
    round_answered,
    round_claims,
    strace_command,
)
from _peers_stores import log, tail
from _peers_trial import GRPC_PORT, Candidate, Lead, Trial, TrialResult, World

DELAY_S = 0.9  # each fsync's delay
WINDOW_S = 30.0  # how long the fsyncs are slow (--quick: QUICK_WINDOW_S)
QUICK_WINDOW_S = 10.0
POLL_S = 0.05  # a round every 50 ms, as the other pollers of the project
ANSWER_S = 1.0  # nimbus.discovery.PER_SEED_TIMEOUT_S: a client's wait for one seed
BASELINE_S = 3.0  # polled before the fault: the same figure on a healthy disk
SYSCALLS = ("fdatasync", "fsync")
ATTACH_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


# -- strace -----------------------------------------------------------------------------


class Strace:
    """strace delaying ``pid``'s fsyncs from :meth:`start` (which returns once it has
    attached to every thread) until :meth:`stop` (SIGTERM: it detaches, the process runs
    on as before)."""

    def __init__(self, pid: int, delay_s: float, log_path: Path) -> None:
        self.pid = pid
        self.delay_s = delay_s
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit: int | None = None

    def start(self) -> Strace:
        # pdeathsig TERM, not KILL: should the bench die, strace still detaches cleanly.
        prefix = [p if p != "KILL" else "TERM" for p in pdeathsig_prefix()]
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [*prefix, *strace_command(self.pid, self.delay_s, SYSCALLS)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while "attached" not in self.log_path.read_text("utf-8", "replace"):
            if self.proc.poll() is not None:
                raise BenchError(
                    f"the fault is not on: strace exited with {self.proc.returncode}: "
                    f"{tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                raise BenchError(
                    f"the fault is not on: strace not attached in {ATTACH_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Terminate strace (it detaches from every thread); kill it if it hangs."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log(f"strace (pid {self.proc.pid}) still runs {STOP_TIMEOUT_S:.0f} s after "
                    "SIGTERM: killed (the kernel detaches it)")  # fmt: skip
                self.proc.kill()
                self.proc.wait()
        self.exit = self.proc.returncode

    def delayed(self) -> int:
        """How many syscalls strace delayed (its ``(DELAYED)`` lines)."""
        return self.log_path.read_text("utf-8", "replace").count("(DELAYED)")


# -- asking the candidates --------------------------------------------------------------


class Asker(Protocol):
    def ask(self, n: int) -> Future[Answer]: ...

    def close(self) -> None: ...


def _answered(future: Future[Answer], leads: bool) -> None:
    with contextlib.suppress(Exception):  # set twice: the first answer stands
        future.set_result((leads, time.monotonic()))


class GrpcAsker:
    """A ``nimbus serve`` replica: ``GetLeaderAddress``, as a client of the project asks."""

    def __init__(self, address: str) -> None:
        import grpc

        from cluster.api import pb, rpc
        from cluster.factory import channel_options

        self._grpc = grpc
        self._request = pb.GetLeaderAddressRequest()
        self._channel = grpc.insecure_channel(address, options=channel_options())
        self._stub = rpc.NimbusStub(self._channel)

    def ready(self, timeout: float) -> None:
        try:
            self._grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except self._grpc.FutureTimeoutError as e:
            raise BenchError(f"no gRPC connection to a replica in {timeout:g} s") from e

    def ask(self, n: int) -> Future[Answer]:
        future: Future[Answer] = Future()
        call = self._stub.GetLeaderAddress.future(self._request, timeout=ANSWER_S)

        def done(call: Any) -> None:
            try:
                reply = call.result()
            except self._grpc.RpcError:
                future.set_result(None)  # no answer in time, or an error: no claim
                return
            _answered(future, bool(reply.responder_is_leader))

        call.add_done_callback(done)
        return future

    def close(self) -> None:
        self._channel.close()


class PipeAsker:
    """A Curator or kazoo candidate: ``poll N`` on its stdin, ``poll N L|F`` back."""

    def __init__(self, candidate: Candidate) -> None:
        self._candidate = candidate
        self._pending: dict[int, Future[Answer]] = {}
        self._lock = threading.Lock()
        candidate.on_poll = self._on_poll

    def _on_poll(self, n: int, leads: bool, at: float) -> None:
        with self._lock:
            future = self._pending.pop(n, None)
        if future is not None:
            with contextlib.suppress(Exception):
                future.set_result((leads, at))

    def ask(self, n: int) -> Future[Answer]:
        future: Future[Answer] = Future()
        with self._lock:
            self._pending[n] = future
        stdin = self._candidate.proc.stdin
        try:
            assert stdin is not None
            stdin.write(f"poll {n}\n".encode())
            stdin.flush()
        except (OSError, ValueError):  # it exited: no claim
            with self._lock:
                self._pending.pop(n, None)
            future.set_result(None)
        return future

    def close(self) -> None:
        self._candidate.on_poll = None


class LockLineAsker:
    """An ``etcdctl lock`` candidate: it claims from its key's line while it runs."""

    def __init__(self, trial: Trial, candidate: Candidate) -> None:
        self._trial = trial
        self._candidate = candidate

    def ask(self, n: int) -> Future[Answer]:
        with self._trial.leads.cond:
            printed = any(lead.index == self._candidate.index for lead in self._trial.leads.seen)
        future: Future[Answer] = Future()
        future.set_result((printed and self._candidate.alive(), time.monotonic()))
        return future

    def close(self) -> None:
        pass


class Polls:
    """Every ``POLL_S`` (on a fixed clock), every asker asked; the rounds kept."""

    def __init__(self, askers: Sequence[Asker]) -> None:
        self._askers = list(askers)
        self._sent: list[tuple[float, list[Future[Answer]]]] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peers-polls", daemon=True)
        self.late = 0  # rounds that went out a whole period or more after their time

    def start(self) -> Polls:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        due = time.monotonic()
        while not self._stopping.is_set():
            now = time.monotonic()
            if now - due >= POLL_S:  # behind by a round or more: go on from now
                self.late += 1
                due = now
            futures: list[Future[Answer]] = []
            for asker in self._askers:
                try:
                    futures.append(asker.ask(n))
                except Exception as e:  # a broken asker is a candidate with no answer
                    log(f"poll {n}: {e!r}")
                    failed: Future[Answer] = Future()
                    failed.set_result(None)
                    futures.append(failed)
            self._sent.append((now, futures))
            n += 1
            due += POLL_S
            self._stopping.wait(max(0.0, due - time.monotonic()))

    def stop(self) -> list[PollRound]:
        """Stop sending; once the last round's answers are due, every round."""
        self._stopping.set()
        self._thread.join(10)
        if self._sent:
            time.sleep(max(0.0, self._sent[-1][0] + ANSWER_S + 0.05 - time.monotonic()))
        for asker in self._askers:
            asker.close()
        rounds = []
        for sent, futures in self._sent:
            answers = [_now(f) for f in futures]
            rounds.append(
                PollRound(
                    sent,
                    round_claims(sent, answers, ANSWER_S),
                    round_answered(sent, answers, ANSWER_S),
                )
            )
        return rounds


def _now(future: Future[Answer]) -> Answer:
    return future.result() if future.done() and future.exception() is None else None


# -- the trial --------------------------------------------------------------------------


class SlowDiskTrial(Trial):
    """Three fresh candidates; polls; ``window_s`` of slow fsyncs on their store."""

    stdin = subprocess.PIPE

    def __init__(
        self, world: World, system: str, round_: int, *, window_s: float, delay_s: float
    ) -> None:
        super().__init__(world, system, SLOW_DISK, round_)
        self.window_s = window_s
        self.delay_s = delay_s

    def askers(self) -> list[Asker]:
        ordered = sorted(self.candidates, key=lambda c: c.index)
        if self.system == "this":
            grpc_askers = [
                GrpcAsker(f"{self.world.net.hosts[c.index].address}:{GRPC_PORT}") for c in ordered
            ]
            try:
                for asker in grpc_askers:
                    asker.ready(10.0)
            except BenchError:
                for asker in grpc_askers:
                    asker.close()
                raise
            return list(grpc_askers)
        if self.system in ("curator", "kazoo"):
            return [PipeAsker(c) for c in ordered]
        if self.system == "etcd":
            return [LockLineAsker(self, c) for c in ordered]
        raise ValueError(f"unknown system {self.system!r}")

    def check_write(self, when: str) -> float:
        took = self.world.timed_write(self.system)
        if took < self.delay_s:
            raise BenchError(
                f"{self.system}: the fault is not on: a write {when} took {took:.3f} s, "
                f"under the {self.delay_s:g} s every fsync should take"
            )
        return took

    def inject(self, leader: Lead) -> TrialResult:
        detail: dict[str, Any] = {"window_s": self.window_s, "delay_s": self.delay_s}
        strace = Strace(
            self.world.store_pid(self.system),
            self.delay_s,
            self.world.workdir / f"strace-{self.system}-{self.name.strip('/')}.log",
        )
        polls = Polls(self.askers()).start()
        on_at = off_at = 0.0
        try:
            try:
                time.sleep(BASELINE_S)
                detail["write_before_s"] = round(self.world.timed_write(self.system), 4)
                strace.start()
                on_at = time.monotonic()
                detail["write_on_s"] = round(self.check_write("just after strace attached"), 4)
                time.sleep(max(0.0, on_at + self.window_s - time.monotonic()))
                off_at = time.monotonic()
                detail["write_end_s"] = round(self.check_write("at the window's end"), 4)
            finally:
                strace.stop()
                detail["strace_exit"] = strace.exit
                detail["delayed_syscalls"] = strace.delayed()
        finally:
            rounds = polls.stop()
        baseline = in_window(rounds, float("-inf"), on_at)
        window = in_window(rounds, on_at, off_at)
        fraction = leaderless_fraction(window)
        if fraction is None:
            raise BenchError(f"{self.system}: no poll rounds in the window")
        before = leaderless_fraction(baseline)
        detail.update(
            rounds=len(window),
            leaderless_rounds=sum(1 for r in window if not any(r.claims)),
            baseline_rounds=len(baseline),
            baseline_leaderless=None if before is None else round(before, 4),
            longest_leaderless_s=round(longest_leaderless_s(window), 3),
            # (seconds after strace attached, length), the first ten
            leaderless_stretches=[
                (round(at - on_at, 2), round(length, 2))
                for at, length in leaderless_stretches(window)[:10]
            ],
            double_claim_rounds=double_claims(window),
            claimants=claimants(window),
            answered_in_time=answered_rounds(window),
            late_rounds=polls.late,
        )
        return TrialResult(
            self.round, self.system, self.fault, leader.index, None, None, None, None,
            leaderless=round(fraction, 4), detail=detail,
        )  # fmt: skip
