"""A cluster of the project's containers (``deploy/containers/up``) driven from the host,
shared by ``tests/test_containers*.py`` and ``bench/containers_failover.py``.

Faults go through the engine (``podman kill``, ``pause``, ``network disconnect``); the
leader is asked of the replicas' host-published ports, with the project's client and CLI,
as a user would. Every wait is a bounded poll on a condition, so a failover is timed from
the moment the fault command starts to the first poll that sees a newer epoch elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nimbus.client import NimbusClient
from tests.cluster import REPO
from tests.waiting import wait_until

CONTAINERS = REPO / "deploy" / "containers"
NIMBUS = str(Path(sys.executable).parent / "nimbus")  # the project's CLI, on the host
#: How often a failover is polled: the resolution of its figure.
POLL_S = 0.05


def engine_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS / "containers.conf")}


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=engine_env(), timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    return done.stdout


@dataclass
class Cluster:
    name: str
    seeds: dict[str, str]  # container -> host-published HOST:PORT
    advertised: dict[str, str]  # container -> advertised address (the replica's id)
    up_s: float
    shown: str  # what up printed: one line per container, then the seeds

    def container_of(self, address: str) -> str:
        return next(c for c, a in self.advertised.items() if a == address)

    def seeds_without(self, container: str) -> list[str]:
        return [s for c, s in self.seeds.items() if c != container]


@contextmanager
def up_cluster(
    name: str, image: str, *, replicas: int, supervisors: int, session_timeout: float
) -> Iterator[Cluster]:
    """``deploy/containers/up`` under ``name``; ``down --volumes`` when the block ends."""
    started = time.monotonic()
    done = subprocess.run(
        [str(CONTAINERS / "up"), "--name", name, "--replicas", str(replicas),
         "--supervisors", str(supervisors), "--session-timeout", str(session_timeout),
         "--image", image],
        capture_output=True, text=True, env=engine_env(), timeout=300,
    )  # fmt: skip
    took = time.monotonic() - started
    try:
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        seeds, advertised = {}, {}
        for line in done.stdout.splitlines():
            if line.startswith("nimbus replica"):
                fields = line.split()
                container = fields[fields.index("(container") + 1].rstrip(",")
                seeds[container] = fields[2]
                advertised[container] = fields[-1].rstrip(")")
        last = done.stdout.strip().splitlines()[-1].split()
        assert last[0] == "seeds" and last[1].split(",") == list(seeds.values())
        yield Cluster(name, seeds, advertised, took, done.stdout)
    finally:
        subprocess.run(
            [str(CONTAINERS / "down"), "--name", name, "--volumes"],
            capture_output=True, env=engine_env(), timeout=120,
        )  # fmt: skip


def nimbuses(seeds: list[str]) -> list[dict[str, object]]:
    shown = subprocess.run(
        [NIMBUS, "nimbuses", "--json", "--seeds", ",".join(seeds)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    listed: list[dict[str, object]] = json.loads(shown.stdout)
    return listed


def one_leader_of_three(cluster: Cluster) -> str:
    listed = nimbuses(list(cluster.seeds.values()))
    leaders = [str(n["address"]) for n in listed if n["is_leader"]]
    if len(listed) == 3 and len(leaders) == 1:
        assert {str(n["address"]) for n in listed} == set(cluster.advertised.values())
        return leaders[0]
    return ""


def leader_now(seeds: list[str]) -> tuple[str, int] | None:
    try:
        with NimbusClient(seeds, read_deadline=1.0, per_seed_timeout=0.5) as client:
            got = client.leader()
        return got.replica_id, got.epoch
    except Exception:
        return None


@dataclass(frozen=True)
class Failover:
    """One fault on the leader's container and what followed, timed on the host."""

    container: str  # the leader's, which took the fault
    old: tuple[str, int]  # (replica, epoch) before the fault
    new: tuple[str, int]  # the first other replica seen leading a newer epoch
    took_s: float  # from the fault command's start to the poll that saw ``new``
    fault_cmd_s: float  # how long the fault command itself took to return
    rejoin_s: float  # from the heal command's start to it naming the leader, three listed


def fail_over(
    cluster: Cluster,
    fault: Callable[[str], object],
    heal: Callable[[str], object],
    what: str,
    meanwhile: Callable[[], object] = lambda: None,
) -> Failover:
    """Inflict ``fault`` on the leader's container, time until another replica leads with
    a newer epoch (polled every ``POLL_S``), then (after ``meanwhile``) ``heal`` it and
    wait for three replicas again."""
    old = wait_until(lambda: leader_now(list(cluster.seeds.values())), timeout=30,
                     message="a leader")  # fmt: skip
    assert old is not None
    wait_until(lambda: one_leader_of_three(cluster), timeout=60, interval=0.5,
               message="three replicas listed before the fault")  # fmt: skip
    container = cluster.container_of(old[0])
    survivors = cluster.seeds_without(container)
    started = time.monotonic()
    fault(container)
    fault_cmd_s = time.monotonic() - started
    try:

        def replaced() -> tuple[str, int] | None:
            now = leader_now(survivors)
            return now if now and now[0] != old[0] and now[1] > old[1] else None

        new = wait_until(replaced, timeout=60, interval=POLL_S,
                         message=f"a new leader after {what}")  # fmt: skip
        assert new is not None
        took = time.monotonic() - started
        print(f"\n{what} of the leader {old[0]} (epoch {old[1]}): new leader {new[0]} "
              f"(epoch {new[1]}) after {took:.2f} s")  # fmt: skip
        meanwhile()
    finally:
        healing = time.monotonic()
        heal(container)

    # Healed, the old leader rejoins as a follower: it names the new term's leader itself
    # (a killed replica's registration stays listed until its session expires, so the
    # listing alone would not show it back), and three are listed with one leader.
    def rejoined() -> bool:
        named = leader_now([cluster.seeds[container]])
        return named is not None and named[1] >= new[1] and bool(one_leader_of_three(cluster))

    wait_until(rejoined, timeout=60, interval=0.5,
               message=f"three replicas again after healing {what}")  # fmt: skip
    return Failover(container, old, new, took, fault_cmd_s, time.monotonic() - healing)
