"""Failover faster than the session timeout: the successor preempts a dead leader.

A leader that dies without closing its session (SIGKILL, OOM, a crash) is otherwise
replaced only when ZooKeeper expires that session: a whole session timeout with no leader.
The follower next in the lock queue (the successor) gathers evidence that the leader's
process is gone, every ``interval`` seconds:

- **refused**: a TCP connect to the leader's advertised address is refused (the host
  answers, nothing listens on the port) on every probe for ``window`` seconds;
- **replaced**: the replica registered at the leader's address (``/nimbuses/<address>``)
  is another session than the one holding the leader's lock node: a new process at the
  same address (a pod restarted in place), so the term's process is gone.

A probe that times out is no evidence: the leader may be paused or cut off, where only
ZooKeeper's expiry may decide. With evidence, the successor deletes the leader's lock
node, fenced on the term (``fencing.preempt``), and then wins the lock as usual (code gate,
epoch bump). A wrong preemption is safe (the old leader's writes are fenced on its lock
node) and costs one failover; a ``cooldown`` keeps it from repeating.
"""

from __future__ import annotations

import enum
import errno
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from cluster.paths import Paths
from cluster.threads import guarded_thread
from fencing.errors import FencingError
from fencing.office import read_leader_epoch
from fencing.preempt import preempt
from leader.discovery import LeaderCache

log = logging.getLogger(__name__)


class Probe(enum.Enum):
    REFUSED = "refused"  # nothing listens there: the process is gone
    OPEN = "open"  # something listens
    SILENT = "silent"  # no answer in time: a pause or a partition, never evidence


def tcp_probe(address: str, timeout: float) -> Probe:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return Probe.OPEN
    except ConnectionRefusedError:
        return Probe.REFUSED
    except OSError as e:
        return Probe.REFUSED if e.errno == errno.ECONNREFUSED else Probe.SILENT


@dataclass(frozen=True)
class PreemptSettings:
    interval: float = 0.1  # seconds between probes
    window: float = 0.5  # seconds of refusals that count as evidence; 0 turns it off
    cooldown: float = 10.0  # no second preemption this soon after one
    probe_timeout: float = 0.2

    def __post_init__(self) -> None:
        if self.window < 0 or self.interval <= 0 or self.probe_timeout <= 0:
            raise ValueError("preemption: window >= 0, interval and probe timeout > 0")


class Preemptor:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        cache: LeaderCache,
        own_node: Callable[[], str | None],
        settings: PreemptSettings,
        *,
        timeout: float,
        on_preempt: Callable[[str], None] | None = None,
        probe: Callable[[str, float], Probe] = tcp_probe,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._paths = paths
        self._id = replica_id
        self._cache = cache
        self._own_node = own_node
        self._s = settings
        self._timeout = timeout
        self._on_preempt = on_preempt
        self._probe = probe
        self._clock = clock
        self._refused_since: float | None = None
        self._watching: str | None = None  # the lock node the evidence is about
        self._term_session: int | None = None  # its owner, read once per lock node
        self._quiet_until = 0.0
        self._stop = threading.Event()
        self._thread = guarded_thread("preemption", self._run, self._stop)

    def start(self) -> None:
        if self._s.window > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._s.interval):
            try:
                self.step()
            except (KazooException, FencingError) as e:
                log.info("preemption probe interrupted: %s", e)
                self._refused_since = None

    def step(self) -> str | None:
        """One probe; returns the evidence when it preempted."""
        target = self._target()
        if target is None:
            self._watching = self._refused_since = None
            return None
        address, lock_node = target
        if lock_node != self._watching:
            self._watching, self._refused_since, self._term_session = lock_node, None, None
        evidence = self._evidence(address, lock_node)
        if evidence is None or self._clock() < self._quiet_until:
            return None
        current, version = read_leader_epoch(self._client, self._paths)
        if current is None or current.lock_node != lock_node:
            return None  # the term changed while we looked
        if not preempt(
            self._client, self._paths, lock_node=lock_node, epoch_version=version,
            timeout=self._timeout,
        ):  # fmt: skip
            return None
        self._quiet_until = self._clock() + self._s.cooldown
        self._refused_since = None
        message = f"preempted leader {address} (epoch {current.epoch}): {evidence}"
        log.warning("%s: %s", self._id, message)
        if self._on_preempt is not None:
            self._on_preempt(evidence)
        return evidence

    def _target(self) -> tuple[str, str] | None:
        """The leader's (address, lock node) when we are next in line after it."""
        mine = self._own_node()
        leader = self._cache.leader()
        if mine is None or leader is None or leader.address == self._id:
            return None
        queue = self._cache.lock_queue()
        held = leader.lock_node.rsplit("/", 1)[-1]
        if held not in queue or queue.index(held) + 1 >= len(queue):
            return None
        if queue[queue.index(held) + 1] != mine.rsplit("/", 1)[-1]:
            return None
        return leader.address, leader.lock_node

    def _evidence(self, address: str, lock_node: str) -> str | None:
        result = self._probe(address, self._s.probe_timeout)
        now = self._clock()
        if result is Probe.REFUSED:
            if self._refused_since is None:
                self._refused_since = now
            refused_for = now - self._refused_since
            if refused_for >= self._s.window:
                return f"{address} refused connections for {refused_for:.2f}s"
            return None
        self._refused_since = None
        if result is Probe.OPEN:
            return self._replaced(address, lock_node)
        return None

    def _replaced(self, address: str, lock_node: str) -> str | None:
        """The registration comes from the leader cache's watch, the lock node's owner from
        one read per term: probing ten times a second costs ZooKeeper nothing. Evidence is
        only acted on once both owners are read again from ZooKeeper itself, after a sync:
        a cache can hold a registration replaced while it was disconnected, and a false
        "replaced" would depose a live leader (seen after a ZooKeeper leader election)."""
        if self._term_session is None:
            held = self._client.exists(lock_node)
            if held is None:
                return None
            self._term_session = int(held.ephemeralOwner)
        registered = self._cache.nimbus_session(address)
        if registered is None or registered == self._term_session:
            return None
        self._client.sync(self._paths.nimbuses)
        held = self._client.exists(lock_node)
        node = self._client.exists(self._paths.nimbus(address))
        if held is None or node is None:
            return None
        self._term_session = int(held.ephemeralOwner)
        if int(node.ephemeralOwner) == self._term_session:
            return None
        return (
            f"a new process (session {int(node.ephemeralOwner):#x}) serves {address}; "
            f"the term's session {self._term_session:#x} is not it"
        )
