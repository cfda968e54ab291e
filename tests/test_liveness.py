"""Liveness: the cluster always comes back to one working leader.

Each test here plants a fault that once left the cluster with no leader, or with a
leader that did no work, and checks what a user would see.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from cluster.paths import Paths
from cluster.threads import guarded, guarded_thread
from nimbus.client import NimbusClient
from tests.cluster import Replica, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, holds, package, submit, sync_flags
from tests.waiting import wait_until

T = 2.0  # the replicas' session timeout (tests.cluster.Replica's default)
PATHS = Paths("/storm")


def test_a_guarded_loop_survives_surprises_and_ends_when_told() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def body() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise OSError(40, "Too many levels of symbolic links")

    guarded("test", body, stopping=lambda: False, backoff=0.5, sleep=slept.append)()
    assert len(calls) == 3 and slept == [0.5, 0.5]

    stop = [False]

    def failing() -> None:
        stop[0] = True  # told to stop while failing: no restart
        raise RuntimeError("late")

    guarded("test", failing, stopping=lambda: stop[0], sleep=slept.append)()
    assert slept == [0.5, 0.5]


def test_a_guarded_thread_is_a_named_daemon_that_ends_when_its_event_is_set() -> None:
    stop = threading.Event()
    failures: list[int] = []

    def body() -> None:
        if not stop.is_set():
            failures.append(1)
            stop.set()  # set while failing: the loop ends instead of restarting
            raise RuntimeError("surprise")

    thread = guarded_thread("test-loop", body, stop, backoff=0.01)
    assert thread.name == "test-loop" and thread.daemon
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive() and failures == [1]


def test_a_gate_that_cannot_read_its_store_does_not_keep_the_cluster_leaderless(
    spawn: Spawn, tmp_path: Path
) -> None:
    """A follower's package file becomes a symlink loop (``stat`` fails with ELOOP). The
    follower wins the lock when the leader dies, and its code gate raises: it must leave
    the queue, so the restarted leader (which holds the code) leads again."""
    a = spawn(extra=sync_flags(replicas=2))
    wait_for_agreed_leader([a], timeout=40)
    b = spawn(extra=sync_flags(replicas=2))
    wait_for_agreed_leader([a, b], timeout=40)
    path, digest = package(tmp_path, "loop")
    with NimbusClient([a.address, b.address]) as client:
        submit(client, path, "loop", digest)
    wait_until(lambda: holds(b, digest), timeout=30, message="the follower's copy")
    broken = b.code_dir / digest
    broken.unlink()
    broken.symlink_to(broken.name)  # a link to itself: every stat fails with ELOOP
    a.stop(signal.SIGKILL)
    wait_until(
        lambda: "elector error" in b.log_path.read_text(errors="replace"),
        timeout=10 * T,
        message="the follower's gate to fail after winning",
    )
    restarted = Replica(a.zookeeper, a.root, tmp_path, port=a.port, code_dir=a.code_dir)
    restarted.extra = a.extra
    restarted.start()
    try:
        leader = wait_for_agreed_leader([restarted, b], timeout=30)
        assert leader.replica_id == restarted.address
        assert b.health() == "SERVING", "the follower's elector still runs"
    finally:
        restarted.stop(signal.SIGKILL)


@pytest.mark.parametrize("grace", [3.0])
def test_sigterm_exits_within_the_grace_period_while_zookeeper_is_unreachable(
    spawn: Spawn, zk_hosts: str, grace: float
) -> None:
    from devtools.faultproxy import FaultProxy

    first = zk_hosts.split(",")[0].split("/")[0]
    chroot = zk_hosts[len(zk_hosts.split("/")[0]) :]
    host, port = first.rsplit(":", 1)
    with FaultProxy(host, int(port)) as proxy:
        replica = spawn(
            extra=(*sync_flags(replicas=1, min_replicas=1), "--shutdown-grace", str(grace)),
            zookeeper=f"{proxy.address}{chroot}",
        )
        wait_for_agreed_leader([replica], timeout=40)
        proxy.blackhole()
        wait_until(lambda: replica.health() != "SERVING", timeout=10 * T, message="the cut")
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGTERM)
        code = replica.proc.wait(timeout=grace + 5)
    assert code == 0


def test_after_a_disconnect_shorter_than_t_the_same_leader_schedules_at_once(
    spawn: Spawn, zk_hosts: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    """The leader's lease lapses and its connection drops for less than a session: the term
    resumes, and a topology submitted right after is scheduled onto a real supervisor
    (duties paused by the lapse carry on; none quit for the rest of the term)."""
    from devtools.faultproxy import FaultProxy
    from tests.test_scheduler_duty import SupervisorProc

    session = 4.0
    first = zk_hosts.split(",")[0].split("/")[0]
    chroot = zk_hosts[len(zk_hosts.split("/")[0]) :]
    host, port = first.rsplit(":", 1)
    supervisor = SupervisorProc(zk_hosts, "sup-1", tmp_path, session_timeout=session, slots=2)
    try:
        with FaultProxy(host, int(port)) as proxy:
            leader = spawn(
                extra=sync_flags(replicas=1, min_replicas=1),
                zookeeper=f"{proxy.address}{chroot}",
                session_timeout=session,
            )
            epoch = wait_for_agreed_leader([leader], timeout=40).epoch
            proxy.blackhole()
            wait_until(lambda: leader.health() != "SERVING", timeout=10, message="the lapse")
            proxy.pass_through()
            # The proxy discarded bytes mid-stream, which TCP never does: a real link comes
            # back with the connection reset or intact, never torn (kazoo's connection loop
            # dies on a torn stream: "xids do not match").
            proxy.reset()
            wait_until(lambda: leader.health() == "SERVING", timeout=10, message="the resume")
            path, digest = package(tmp_path, "after")
            with NimbusClient([leader.address]) as client:
                reply = submit(client, path, "after", digest)
            assert reply.epoch == epoch, "the same term resumed"
            beat = PATHS.workerbeats_of(reply.topology_id)
            wait_until(
                lambda: zk_client.exists(beat) and zk_client.get_children(beat),
                timeout=30,
                message="the supervisor's heartbeat for the new topology's slot",
            )
    finally:
        supervisor.stop()


def test_without_flags_a_submit_waits_for_a_second_copy_when_there_is_a_second_replica(
    spawn: Spawn, tmp_path: Path
) -> None:
    """--min-replicas defaults to min(2, live replicas), counted at each submit: a lone
    replica acknowledges alone; once a second one is live, every submit waits for it."""
    flags = ("--sync-interval", "0.3", "--max-package-mib", "1")
    lone = spawn(extra=flags)
    wait_for_agreed_leader([lone], timeout=40)
    path, digest = package(tmp_path, "lone")
    with NimbusClient([lone.address]) as client:
        assert list(submit(client, path, "lone", digest).code_replicas) == [lone.address]
    second = spawn(extra=flags)
    wait_for_agreed_leader([lone, second], timeout=40)
    path, digest = package(tmp_path, "pair")
    with NimbusClient([lone.address, second.address]) as client:
        held = submit(client, path, "pair", digest).code_replicas
    assert sorted(held) == sorted([lone.address, second.address])
