"""Moving off a ZooKeeper server that holds our beats only when it is slower than the rest
(issue 41, point 6; ``nimbus.server.stall_move``).

The rule on a fake clock; then real 3-server ensembles: one whose every server's fsync is
slow (strace's fault injection: every write then takes one to two fsyncs through any
server) must see no move, where the fixed 1 s stall with its fixed 1 s probe moved
replicas and so cancelled terms; and a frozen server must still be left, on a fast
ensemble and on the slow one.
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from cluster.paths import Paths
from cluster.quorum_probe import probe_for
from cluster.server_move import Move, ServerMover, current_server
from devtools.zkserver import ZooKeeperCluster, external_connect_string
from fencing import ensure_folders
from fencing.lease import Lease
from leader.heartbeat import BeatAck, Beater
from leader.settings import BeatSettings
from nimbus.server.stall_move import StallMove, StallRule, follow_stalls
from tests.chaos.slow_disk import FsyncStall
from tests.waiting import wait_until

T = 10.0  # the probe's own deadline is then 1 s, as at Storm's T = 20 s
FSYNC_DELAY = 0.7  # every write 0.7-1.4 s: across the old 1 s stall, and the 1 s probe
SLOW_FOR = 20.0
BEATS = BeatSettings()
FLOOR = max(BEATS.silence_window / 2, 4 * BEATS.interval)  # the stall that was fixed

STRACE_LOGS = Path(tempfile.gettempdir()) / "stall-move-strace"


Wiring = Callable[[Beater, ServerMover], object]


class _Heard:
    """A bare beater's events as the elector reports them (``on_beat``, ``on_stall``)."""

    def __init__(self, beater: Beater) -> None:
        self.on_beat = beater.add_listener
        self.on_stall = beater.on_stall


def production_wiring(beater: Beater, mover: ServerMover) -> object:
    return follow_stalls(_Heard(beater), mover, BEATS, T)


# -- the rule, on a fake clock ---------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_stall_threshold_follows_the_round_trips_of_acknowledged_beats() -> None:
    clock = FakeClock()
    rule = StallRule(floor=1.0, ceiling=5.0, clock=clock)
    assert rule.threshold() == 1.0  # nothing acknowledged yet: the floor

    def acked(rtt: float) -> None:
        rule.beat_acked(clock.now - rtt, clock.now)
        clock.now += 0.2

    for _ in range(10):  # a fast ensemble
        acked(0.01)
    assert rule.threshold() == 1.0
    for rtt in (0.7, 1.3, 0.9, 1.2):  # every server's fsync slow: 1-2 fsyncs a write
        acked(rtt)
    # A beat held 1.3 s is no stall now (the fixed 1 s reported it): twice the slowest.
    assert rule.threshold() == pytest.approx(2.6)
    assert rule.probe_deadline(rule.threshold()) == pytest.approx(1.3)
    acked(4.0)
    assert rule.threshold() == 5.0, "never past T/2: the move must land within the session"
    clock.now += 10.1  # the slow spell forgotten after LATENCY_MEMORY
    acked(0.01)
    assert rule.threshold() == 1.0


def test_a_stall_probes_for_half_its_wait_and_an_ack_since_the_report_calls_the_move_off() -> None:
    clock = FakeClock()
    calls: list[tuple[str, float, Callable[[], bool]]] = []
    called = threading.Event()

    def move(why: str, *, probe_timeout: float, unless: Callable[[], bool]) -> Move | None:
        calls.append((why, probe_timeout, unless))
        called.set()
        return None

    stalls = StallMove(StallRule(floor=1.0, ceiling=5.0, clock=clock), move, clock=clock)
    stalls.beat_acked(BeatAck(sent=clock.now - 0.3, acked=clock.now - 0.1, lease=0.4))
    stalls.stalled(1.2)
    assert called.wait(5)
    ((why, deadline, unless),) = calls
    assert "1.2s" in why and deadline == pytest.approx(0.6)
    assert not unless(), "an ack from before the report is no answer to the stalled beat"
    clock.now += 0.4
    stalls.beat_acked(BeatAck(sent=clock.now - 1.6, acked=clock.now, lease=0.4))
    assert unless(), "our beat answered while the probe ran: our server is no slower"


def test_a_report_while_a_probe_runs_is_probed_after_it_with_the_stall_grown() -> None:
    """The beater reports a stall again as it grows, about when a refused probe ends: the
    report must be probed then (with the wait it has grown to), not dropped as busy."""
    clock = FakeClock()
    deadlines: list[float] = []
    release, entered = threading.Event(), threading.Event()
    done = threading.Event()

    def move(why: str, *, probe_timeout: float, unless: Callable[[], bool]) -> Move | None:
        deadlines.append(probe_timeout)
        entered.set()
        if len(deadlines) == 1:
            release.wait(5)  # the first probe is still running
        else:
            done.set()
        return None

    stalls = StallMove(StallRule(floor=1.0, ceiling=5.0, clock=clock), move, clock=clock)
    stalls.stalled(2.0)
    assert entered.wait(5)
    clock.now += 0.5
    stalls.stalled(3.0)  # while the first probe runs
    clock.now += 0.5  # the first probe ends 0.5 s after that report
    release.set()
    assert done.wait(5), "the report made while busy was dropped"
    assert deadlines == [pytest.approx(1.0), pytest.approx(1.75)], "3.0 s grown by 0.5 s, halved"


def test_a_report_while_a_probe_runs_is_dropped_once_a_beat_is_answered() -> None:
    clock = FakeClock()
    calls: list[float] = []
    release, entered = threading.Event(), threading.Event()

    def move(why: str, *, probe_timeout: float, unless: Callable[[], bool]) -> Move | None:
        calls.append(probe_timeout)
        entered.set()
        release.wait(5)
        return None

    stalls = StallMove(StallRule(floor=1.0, ceiling=5.0, clock=clock), move, clock=clock)
    stalls.stalled(2.0)
    assert entered.wait(5)
    stalls.stalled(3.0)
    clock.now += 0.2
    stalls.beat_acked(BeatAck(sent=clock.now - 3.2, acked=clock.now, lease=0.4))
    release.set()
    wait_until(lambda: not stalls.busy(), timeout=5, message="the mover idle again")
    assert calls == [pytest.approx(1.0)], "a stall already answered is probed no more"


# -- real ensembles ------------------------------------------------------------------------


@dataclass
class Replica:
    """A queued replica's beats and its mover, wired as the daemon wires them."""

    client: KazooClient
    beater: Beater
    mover: ServerMover
    acks: list[BeatAck] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)

    def round_trips(self, since: float) -> list[float]:
        return [a.acked - a.sent for a in list(self.acks) if a.sent >= since]

    def stop(self) -> None:
        self.beater.stop()
        self.mover.stop()
        self.client.stop()
        self.client.close()


def start_replica(
    zk: ZooKeeperCluster, paths: Paths, name: str, first: int, wire: Wiring
) -> Replica:
    order = [first, *(i for i in range(zk.size) if i != first)]
    client = KazooClient(
        hosts=",".join(zk.node_connect_string(i) for i in order), timeout=T, randomize_hosts=False
    )
    client.start(timeout=30)
    ensure_folders(client, paths.folders())
    node = client.create(f"{paths.leader_lock}/{name}__lock__", ephemeral=True, sequence=True)
    beater = Beater(
        client, paths, name, own_node=lambda: node, lease=Lease(BEATS.leader_lease),
        interval=BEATS.interval, timeout=T, on_lock_gone=lambda _node: None,
    )  # fmt: skip
    moves: list[Move] = []
    mover = ServerMover(  # as the daemon makes it
        client, min_interval=max(BEATS.silence_window, 1.0), quarantine=max(T, 10.0),
        on_move=moves.append, probe=probe_for(client, T),
    )  # fmt: skip
    replica = Replica(client, beater, mover, moves=moves)
    beater.add_listener(replica.acks.append)
    wire(beater, mover)
    beater.start()
    return replica


@pytest.fixture(scope="module")
def synced_ensemble(fsync_stall: type[FsyncStall]) -> Iterator[ZooKeeperCluster]:
    """Three servers of their own that fsync (the session's ensemble does not), for the
    stall tests alone (none is started where fsyncs cannot be slowed)."""
    if external_connect_string():
        pytest.skip("needs ZooKeeper processes started by the tests (strace attaches to them)")
    with ZooKeeperCluster(size=3, force_sync=True) as zk:
        yield zk


@dataclass(frozen=True)
class SlowSpell:
    moves: list[Move]
    round_trips: list[list[float]]  # per replica, of beats sent in the spell
    kept: list[bool]  # per replica: the same server and session after the spell


def run_slow_spell(
    zk: ZooKeeperCluster, stall: type[FsyncStall], wire: Wiring, seconds: float = SLOW_FOR
) -> SlowSpell:
    """Three replicas, one on each server, beating through ``seconds`` of slow fsyncs."""
    paths = Paths(f"/slow-{uuid.uuid4().hex[:8]}")
    replicas = [start_replica(zk, paths, f"r{i}", i, wire) for i in range(zk.size)]
    try:
        wait_until(
            lambda: all(len(r.acks) >= 3 for r in replicas), timeout=30, message="beats acked"
        )
        before = [(current_server(r.client), r.client.client_id[0]) for r in replicas]
        with stall(zk.pids(), FSYNC_DELAY, STRACE_LOGS):
            began = time.monotonic()
            time.sleep(seconds)
        after = [(current_server(r.client), r.client.client_id[0]) for r in replicas]
        return SlowSpell(
            moves=[m for r in replicas for m in r.moves],
            round_trips=[r.round_trips(began) for r in replicas],
            kept=[b == a for b, a in zip(before, after, strict=True)],
        )
    finally:
        for replica in replicas:
            replica.stop()


@pytest.mark.timeout(240)
def test_a_uniformly_slow_ensemble_moves_no_replica(
    synced_ensemble: ZooKeeperCluster, fsync_stall: type[FsyncStall]
) -> None:
    spell = run_slow_spell(synced_ensemble, fsync_stall, production_wiring)
    slowest = [max(r, default=0.0) for r in spell.round_trips]
    figures = f"beats per replica {[len(r) for r in spell.round_trips]}, slowest {slowest}"
    assert spell.moves == [], figures
    assert all(spell.kept), f"every replica on its server, same session ({figures})"
    assert all(len(r) >= 10 for r in spell.round_trips), f"slow, not stopped ({figures})"
    # Not vacuous: beats were held past the fixed stall that used to report them.
    assert max(slowest) > FLOOR, figures


def freeze_and_see_a_move(zk: ZooKeeperCluster, replica: Replica, index: int) -> None:
    frozen, session = current_server(replica.client), replica.client.client_id[0]
    zk.pause(index)
    try:
        paused_at = time.monotonic()
        wait_until(
            lambda: any(a.sent > paused_at for a in list(replica.acks)),
            timeout=30,
            message="a beat acknowledged after our server froze",
        )
    finally:
        zk.resume(index)
    assert [m.suspect for m in replica.moves] == [frozen], "moved once, off the frozen server"
    assert replica.client.client_id[0] == session, "the same session"


def follower_index(zk: ZooKeeperCluster) -> int:
    return next(i for i in range(zk.size) if zk.node_mode(i) == "follower")


def test_a_frozen_server_is_left_through_the_daemons_wiring(
    healthy_ensemble: ZooKeeperCluster,
) -> None:
    """The probe's shorter deadline and the call-off leave a real stall its move."""
    zk = healthy_ensemble
    follower = follower_index(zk)  # a frozen ZooKeeper leader would stall every server
    replica = start_replica(
        zk, Paths(f"/frozen-{uuid.uuid4().hex[:8]}"), "r1", follower, production_wiring
    )
    try:
        wait_until(lambda: len(replica.acks) >= 3, timeout=30, message="beats acked")
        freeze_and_see_a_move(zk, replica, follower)
    finally:
        replica.stop()


@pytest.mark.timeout(240)
def test_a_frozen_server_in_a_uniformly_slow_ensemble_is_still_left(
    synced_ensemble: ZooKeeperCluster, fsync_stall: type[FsyncStall]
) -> None:
    zk = synced_ensemble
    follower = follower_index(zk)
    paths = Paths(f"/slow-frozen-{uuid.uuid4().hex[:8]}")
    others = [i for i in range(zk.size) if i != follower]
    replica = start_replica(zk, paths, "r1", follower, production_wiring)
    load = [start_replica(zk, paths, f"r{i + 2}", i, production_wiring) for i in others]
    try:
        wait_until(lambda: len(replica.acks) >= 3, timeout=30, message="beats acked")
        with fsync_stall(zk.pids(), FSYNC_DELAY, STRACE_LOGS):
            time.sleep(5)  # the slow round trips are what the threshold follows now
            assert max(replica.round_trips(time.monotonic() - 5)) > FLOOR
            freeze_and_see_a_move(zk, replica, follower)
        assert [m for r in load for m in r.moves] == [], "the others stayed"
    finally:
        for r in (replica, *load):
            r.stop()
