"""The client workload: submit and kill small topologies at a fixed rate, record every call.

A dispatcher starts one call every ``1/rate`` seconds, whatever the calls before it are
doing, so an outage shows as a gap in successes rather than as fewer attempts. Calls run
on worker threads, each owning one ``NimbusClient`` (S4 follows one client's epochs in
order); when every worker of a kind is busy riding out an outage, the slot is skipped.
Submits and kills have separate workers: a submit can wait seconds for its package check
and replicas, and must not starve the cheap kills that time an outage. Every other
acknowledged submit is killed, so half the topologies stay active for S3; with nothing
new to kill, a kill repeats on a killed topology (still a fenced write). A new package
(digest) comes every few submits: each new digest costs the leader a validation run.
Every call carries its own request id so the checkers can find the record it made. Each
client has the defaults a CLI user gets (deadlines, retries, hedged discovery, keepalive),
so the figures are what a user sees.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path

import grpc

from cluster.api import pb
from code_sync.package import make_package
from nimbus.client import (
    MUTATE_DEADLINE_S,
    SUBMIT_DEADLINE_S,
    NimbusCallError,
    NimbusClient,
    NoLeaderError,
)
from tests.chaos.history import Call, History

# Refusals after which nothing was written; anything else may have landed.
DEFINITE = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
KILL_WAIT_S = 24 * 3600  # killed topologies stay as KILLED records: evidence for S1 and S2
MIX = ("submit", "kill", "kill", "submit", "kill", "leader")
# The smallest topology the leader's package check accepts (a rate spout to the console).
TOPOLOGY_PY = b"""from pipeline.api import ConsoleSink, RateSpout, TopologyBuilder


def build():
    builder = TopologyBuilder()
    builder.set_spout("ticks", RateSpout(1))
    builder.set_bolt("print", ConsoleSink()).shuffle_grouping("ticks")
    return builder.build()
"""

Op = tuple[str, str]  # kind, topology name


class Workload:
    def __init__(
        self,
        seeds: list[str],
        history: History,
        workdir: Path,
        *,
        workers: int = 4,
        rate: float = 8.0,
        package_every: int = 16,
        observe_ack: Callable[[Call], None] | None = None,
    ) -> None:
        """``observe_ack(call)`` runs right after a submit is acknowledged, before the
        call is recorded: the runner reads the code holders then (checker S3)."""
        self._observe_ack = observe_ack
        self._seeds = seeds
        self._history = history
        self._dir = workdir / "packages"
        self._dir.mkdir(parents=True, exist_ok=True)
        self._period = 1.0 / rate
        self._package_every = package_every
        self._run_id = uuid.uuid4().hex[:6]
        self._stop = threading.Event()
        # submits on one pool, kills and leader lookups on the other: (queue, idle slots)
        self._pools = [(queue.Queue[Op | None](), threading.Semaphore(workers)) for _ in "sk"]
        self._to_kill: deque[str] = deque()
        self._killed: list[str] = []
        self._guard = threading.Lock()
        self._submitted = 0
        self._submitted_ok = 0
        self._package = self._new_package()
        self.skipped = 0
        self._threads = [
            threading.Thread(
                target=self._work, args=(p * workers + w, p), name=f"workload-{p}-{w}", daemon=True
            )
            for p in range(2)
            for w in range(workers)
        ]
        self._dispatcher = threading.Thread(target=self._dispatch, name="workload", daemon=True)

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        self._dispatcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._dispatcher.join()
        for ops, _ in self._pools:
            for _ in range(len(self._threads)):
                ops.put(None)
        for t in self._threads:
            t.join(timeout=MUTATE_DEADLINE_S + SUBMIT_DEADLINE_S + 10)

    # -- scheduling ---------------------------------------------------------------------

    def _dispatch(self) -> None:
        next_at = self._history.now()
        n = 0
        while not self._stop.wait(max(0.0, next_at - self._history.now())):
            kind = MIX[n % len(MIX)]
            n += 1
            next_at = max(next_at + self._period, self._history.now())
            op = self._op(kind, n)
            ops, idle = self._pools[op[0] != "submit"]
            if not idle.acquire(blocking=False):
                self.skipped += 1
                continue
            ops.put(op)

    def _op(self, kind: str, n: int) -> Op:
        if kind == "kill":
            with self._guard:
                if self._to_kill:
                    name = self._to_kill.popleft()
                    self._killed.append(name)
                    return ("kill", name)
                if self._killed:
                    return ("kill", self._killed[-1])  # again: idempotent, still a write
            kind = "submit"  # nothing acknowledged to kill yet
        if kind == "submit":
            return ("submit", f"t-{self._run_id}-{n}")
        return ("leader", "")

    def _work(self, worker: int, pool: int) -> None:
        ops, idle = self._pools[pool]
        client = NimbusClient(self._seeds)  # a user's defaults: deadlines, retries, hedging
        try:
            while (op := ops.get()) is not None:
                kind, name = op
                try:
                    if kind == "submit":
                        self._submit(client, worker, name)
                    elif kind == "kill":
                        self._kill(client, worker, name)
                    else:
                        self._leader(client, worker)
                finally:
                    idle.release()
        finally:
            client.close()

    # -- calls --------------------------------------------------------------------------

    def _new_package(self) -> tuple[bytes, str]:
        path = make_package(
            {"topology.py": TOPOLOGY_PY, "data.bin": os.urandom(512)},
            self._dir / f"{uuid.uuid4().hex}.zip",
        )
        data = path.read_bytes()
        path.unlink()
        return data, hashlib.sha256(data).hexdigest()

    def _next_package(self) -> tuple[bytes, str]:
        with self._guard:
            self._submitted += 1
            if self._submitted % self._package_every == 0:
                self._package = self._new_package()
            return self._package

    def _submit(self, client: NimbusClient, worker: int, name: str) -> None:
        data, digest = self._next_package()
        call = Call(worker, "submit", name, uuid.uuid4().hex, self._history.now(), digest=digest)
        header = pb.SubmitHeader(
            name=name,
            expected_digest=digest,
            package_size=len(data),
            client_request_id=call.request_id,
        )

        def run() -> None:
            reply = client.submit(header, lambda: iter([data]))
            call.topology_id, call.reply_epoch = reply.topology_id, int(reply.epoch)

        self._record(client, call, run)
        if call.outcome == "ok":
            with self._guard:
                self._submitted_ok += 1
                if self._submitted_ok % 2:
                    self._to_kill.append(name)

    def _kill(self, client: NimbusClient, worker: int, name: str) -> None:
        call = Call(worker, "kill", name, uuid.uuid4().hex, self._history.now())
        request = pb.KillTopologyRequest(
            name=name, wait_s=KILL_WAIT_S, client_request_id=call.request_id
        )

        def run() -> None:
            reply = client.call_leader("KillTopology", request)
            call.topology_id, call.reply_epoch = reply.topology_id, int(reply.epoch)

        self._record(client, call, run)

    def _leader(self, client: NimbusClient, worker: int) -> None:
        call = Call(worker, "leader", "", "", self._history.now())

        def run() -> None:
            call.reply_epoch = int(client.leader().epoch)

        self._record(client, call, run)

    def _record(self, client: NimbusClient, call: Call, run: Callable[[], None]) -> None:
        try:
            run()
            call.outcome = "ok"
        except NimbusCallError as e:
            call.code = e.code.name
            call.outcome = "fail" if e.code in DEFINITE else "unknown"
            call.detail = str(e)[:200]
        except NoLeaderError as e:
            call.code, call.detail = "NO_LEADER", str(e)[:200]
        except Exception as e:  # anything else is unknown, and recorded, not raised
            call.code, call.detail = type(e).__name__, str(e)[:200]
        call.end = self._history.now()
        call.epoch_seen = client.max_epoch_seen
        call.leader_claims = client.leader_claims[:]
        client.leader_claims.clear()
        if call.outcome == "ok" and call.kind == "submit" and self._observe_ack is not None:
            self._observe_ack(call)
        self._history.add(call)
