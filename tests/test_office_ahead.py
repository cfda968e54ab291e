"""A graceful handover, cut to the old leader's delete and the next replica's take-office:
the take-office multi-op goes out from kazoo's event thread as the deletion arrives
(``leader.office_ahead``), a conflict is decided again from fresh reads, and a stopping
leader's teardown waits for that take-office (``leader.seat.Successor``). Real ZooKeeper,
real electors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from fencing.membership import ensure_folders
from fencing.office import office_outcome, read_leader_epoch, send_office
from leader.elector import Elector
from leader.read_ahead import DecidedAhead, ReadAheadLock, WinnerReads, queue_lock
from leader.seat import Successor
from leader.settings import ElectorCallbacks, ElectorSettings
from tests.waiting import wait_until
from tests.zk_fixtures import kazoo_session

ROOT = "/storm"
PATHS = Paths(ROOT)


def _first(client: KazooClient) -> str:
    """The head of the queue: the lowest sequence number (names begin with a random id)."""
    names = client.get_children(PATHS.leader_lock)
    return PATHS.lock_node(min(names, key=lambda n: n[-10:]))


def _win(lock: ReadAheadLock, won: threading.Event) -> None:
    if lock.acquire():
        won.set()


def test_the_take_office_goes_out_on_kazoos_event_thread_as_the_node_ahead_goes(
    zk_client: KazooClient, zk_hosts: str
) -> None:
    ensure_folders(zk_client, PATHS.folders())
    assert queue_lock(zk_client, PATHS, "holder:1").acquire(timeout=10)
    calls: list[tuple[threading.Thread, str]] = []

    with kazoo_session(zk_hosts) as follower:

        def send(lock_node: str, reads: WinnerReads) -> DecidedAhead | None:
            calls.append((threading.current_thread(), lock_node))
            attempt = send_office(
                follower, PATHS, reads.office, lock_node=lock_node, holder="follower:1",
                now_ms=lambda: 0, beat=None, beat_data=b"", beat_exists=None,
            )  # fmt: skip
            return DecidedAhead(attempt, sent=0.0, lease=1.0)

        lock = queue_lock(follower, PATHS, "follower:1", send_office=send)
        won = threading.Event()
        waiter = threading.Thread(target=_win, args=(lock, won), daemon=True)
        waiter.start()
        wait_until(lambda: lock._next is not None, timeout=10, message="the follower armed")
        zk_client.delete(_first(zk_client))
        assert won.wait(10), "the follower never won"
        assert lock.skipped_listing
        assert len(calls) == 1 and calls[0][1] == PATHS.lock_node(lock.node)
        assert calls[0][0] is not waiter  # not the thread that waits in acquire()
        assert lock.office is not None and lock.office.attempt is not None
        epoch = office_outcome(lock.office.attempt, timeout=10)
        current, _ = read_leader_epoch(zk_client, PATHS)
        assert epoch == 1 and current is not None
        assert (current.epoch, current.holder) == (1, "follower:1")
        assert current.lock_node == PATHS.lock_node(lock.node)


def test_a_change_just_before_the_node_ahead_goes_is_in_what_the_take_office_decided_from(
    zk_client: KazooClient, zk_hosts: str
) -> None:
    """The change fires a watch: the reads are sent again, and the take-office goes out at
    the deletion only from those (answered by then, or the elector decides)."""
    ensure_folders(zk_client, PATHS.folders())
    assert queue_lock(zk_client, PATHS, "holder:1").acquire(timeout=10)
    seen: list[int] = []

    def send(lock_node: str, reads: WinnerReads) -> DecidedAhead | None:
        seen.append(int(reads.storms.get(timeout=0).numChildren))
        return None

    with kazoo_session(zk_hosts) as follower:
        lock = queue_lock(follower, PATHS, "follower:1", send_office=send)
        won = threading.Event()
        threading.Thread(target=_win, args=(lock, won), daemon=True).start()
        wait_until(lambda: lock._next is not None, timeout=10, message="the follower armed")
        tx = zk_client.transaction()  # a topology, then the deletion: back to back
        tx.create(PATHS.storm("t-1"), b"")
        tx.delete(_first(zk_client))
        tx.commit()
        assert won.wait(10), "the follower never won"
    assert all(n == 1 for n in seen), seen  # never from the reads before the change
    assert lock.office is None and lock.reads is not None
    assert lock.reads.storms.get().numChildren == 1


def _elector(
    client: KazooClient, replica: str, gate: Callable[[], bool], **kwargs: object
) -> Elector:
    """With ``gate_given`` (as the daemon's), the take-office can go out at the deletion."""
    settings = ElectorSettings(
        paths=PATHS, replica_id=replica, session_timeout=4.0, gate_poll_interval=0.05
    )
    callbacks = ElectorCallbacks(has_all_code=gate, **kwargs)  # type: ignore[arg-type]
    return Elector(client, settings, callbacks)


def _leader(client: KazooClient) -> records.LeaderEpoch | None:
    return read_leader_epoch(client, PATHS)[0]


def test_a_take_office_sent_at_the_deletion_that_conflicts_is_decided_again(
    zk_client: KazooClient, zk_hosts: str
) -> None:
    """``/epochs`` is not watched: an entry made behind the next replica's reads makes its
    early multi-op fail; it takes office with the epoch above it, from fresh reads."""
    ensure_folders(zk_client, PATHS.folders())
    with kazoo_session(zk_hosts) as a_client, kazoo_session(zk_hosts) as b_client:
        a = _elector(a_client, "a:1", lambda: True)
        b = _elector(b_client, "b:1", lambda: True, gate_given=lambda _: True)
        a.start()
        try:
            assert a.wait_for(lambda h: any("took office, epoch 1" in s for s in h), 10)
            b.start()
            wait_until(lambda: len(zk_client.get_children(PATHS.leader_lock)) == 2, timeout=10)
            zk_client.create(PATHS.epoch(2), b"")  # behind b's reads (sent as it queued)
            a.stop()
            assert b.wait_for(lambda h: any("took office, epoch 3" in s for s in h), 10)
            assert any("sent at the deletion conflicted" in s for s in b.history), b.history
            current = _leader(zk_client)
            assert current is not None and (current.epoch, current.holder) == (3, "b:1")
        finally:
            a.stop()
            b.stop()


def test_a_stopping_leaders_teardown_waits_for_the_next_replicas_take_office(
    zk_client: KazooClient, zk_hosts: str
) -> None:
    """The next replica's gate takes 0.3 s: the old leader's ``on_deposed`` (its teardown)
    ran before that take-office, beside it on a small machine; now after it."""
    ensure_folders(zk_client, PATHS.folders())
    seen_at_deposed: list[records.LeaderEpoch | None] = []
    b_gate_slow = threading.Event()

    def b_gate() -> bool:
        if b_gate_slow.is_set():
            time.sleep(0.3)  # the fault: a slow gate (its own work), not a synchronisation
        return True

    with kazoo_session(zk_hosts) as a_client, kazoo_session(zk_hosts) as b_client:
        a = _elector(
            a_client, "a:1", lambda: True,
            on_deposed=lambda _: seen_at_deposed.append(_leader(zk_client)),
        )  # fmt: skip
        b = _elector(b_client, "b:1", b_gate)
        a.start()
        try:
            assert a.wait_for(lambda h: any("took office, epoch 1" in s for s in h), 10)
            b.start()
            wait_until(lambda: len(zk_client.get_children(PATHS.leader_lock)) == 2, timeout=10)
            b_gate_slow.set()
            a.stop()
            assert seen_at_deposed, "on_deposed did not run"
            first = seen_at_deposed[0]
            assert first is not None and (first.epoch, first.holder) == (2, "b:1")
        finally:
            a.stop()
            b.stop()


def test_the_successor_watch_waits_only_with_someone_queued_behind(
    zk_client: KazooClient,
) -> None:
    ensure_folders(zk_client, PATHS.folders())

    def naming(node: str) -> bytes:
        return records.LeaderEpoch(epoch=1, holder="x", lock_node=node).SerializeToString()

    own = zk_client.create(PATHS.lock_node("x__lock__"), b"", ephemeral=True, sequence=True)
    zk_client.create(PATHS.leader_epoch, naming(own))
    alone = Successor(zk_client, PATHS, own)
    assert alone.wait(5) is False  # at once: nobody to wait for
    other = zk_client.create(PATHS.lock_node("y__lock__"), b"", ephemeral=True, sequence=True)
    nobody_took = Successor(zk_client, PATHS, own)
    assert nobody_took.wait(0.2) is False
    took = Successor(zk_client, PATHS, own)
    zk_client.set(PATHS.leader_epoch, naming(other))
    assert took.wait(5) is True
    already = Successor(zk_client, PATHS, own)  # its read answered after the take-office
    assert already.wait(5) is True and not already.took.is_set()
