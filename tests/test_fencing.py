"""The fenced writer against a real ZooKeeper: zombies, lost connections, conflicts, races."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.recipe.lock import Lock

from cluster.api import records
from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from devtools.faultproxy import FaultProxy
from fencing import (
    Check,
    ConflictReason,
    Create,
    Delete,
    FencedWriter,
    LeadershipToken,
    Membership,
    MembershipError,
    NotLeaderError,
    SetData,
    VersionConflictError,
    WriteConflictError,
    WriteOutcomeUnknown,
)
from fencing.office import prune_epochs, read_leader_epoch, take_office
from tests.processes import REPO, python_child
from tests.waiting import wait_until

ROOT = "/storm"
SESSION = 2.0


def _now_ms() -> int:
    return 0


def _lead(client: KazooClient, identifier: str = "me:1") -> tuple[Lock, LeadershipToken]:
    client.ensure_path(f"{ROOT}/leader-lock")
    client.ensure_path(f"{ROOT}/epochs")
    lock = Lock(client, f"{ROOT}/leader-lock", identifier=identifier)
    assert lock.acquire(timeout=10)
    node = f"{lock.path}/{lock.node}"
    epoch = take_office(
        client, Paths(ROOT), lock_node=node, holder=identifier, now_ms=_now_ms, timeout=5
    )
    return lock, LeadershipToken(node, epoch)


@pytest.fixture
def token(zk_client: KazooClient) -> LeadershipToken:
    """In office (its lock node lives with ``zk_client``'s session), with ``ROOT/data`` to
    write under."""
    _, token = _lead(zk_client)
    zk_client.ensure_path(f"{ROOT}/data")
    return token


@pytest.fixture
def writer(zk_client: KazooClient, token: LeadershipToken) -> FencedWriter:
    return FencedWriter(zk_client, token, timeout=5)


def test_writes_apply_behind_the_check_and_records_carry_the_epoch(
    zk_client: KazooClient, token: LeadershipToken, writer: FencedWriter
) -> None:
    writer.create_record(f"{ROOT}/data/base", records.StormBase(name="wc", status=records.ACTIVE))
    data, _ = zk_client.get(f"{ROOT}/data/base")
    stored = records.StormBase.FromString(data)
    assert stored.name == "wc"
    assert stored.epoch == token.epoch >= 1
    writer.set(f"{ROOT}/data/base", b"raw")
    assert zk_client.get(f"{ROOT}/data/base")[0] == b"raw"
    writer.delete(f"{ROOT}/data/base")
    assert zk_client.exists(f"{ROOT}/data/base") is None


def test_a_failed_target_is_a_conflict_that_writes_nothing_and_keeps_leadership(
    zk_client: KazooClient, token: LeadershipToken, writer: FencedWriter
) -> None:
    writer.create(f"{ROOT}/data/a")
    with pytest.raises(WriteConflictError) as exists:
        writer.batch([Create(f"{ROOT}/data/b"), Create(f"{ROOT}/data/a")])
    assert exists.value.reason is ConflictReason.EXISTS
    assert zk_client.exists(f"{ROOT}/data/b") is None, "the batch must be all or nothing"
    with pytest.raises(VersionConflictError):
        writer.set(f"{ROOT}/data/a", b"x", version=7)
    with pytest.raises(WriteConflictError) as missing:
        writer.delete(f"{ROOT}/data/missing")
    assert missing.value.reason is ConflictReason.NO_NODE
    assert not token.cancelled


def test_recursive_delete_removes_a_tree_in_one_step(
    zk_client: KazooClient, writer: FencedWriter
) -> None:
    writer.batch(
        [
            Create(f"{ROOT}/data/t"),
            Create(f"{ROOT}/data/t/x"),
            Create(f"{ROOT}/data/t/x/y"),
            Create(f"{ROOT}/data/t/z"),
        ]
    )
    assert writer.delete_recursive(f"{ROOT}/data/t") == 4
    assert zk_client.exists(f"{ROOT}/data/t") is None
    assert writer.delete_recursive(f"{ROOT}/data/t") == 0


def test_operator_deleting_the_lock_node_deposes_the_holder(
    zk_client: KazooClient, token: LeadershipToken, writer: FencedWriter
) -> None:
    zk_client.delete(token.lock_node)  # what an operator would do by hand
    with pytest.raises(NotLeaderError, match="lock node"):
        writer.create(f"{ROOT}/data/after-delete")
    assert token.cancelled
    assert zk_client.exists(f"{ROOT}/data/after-delete") is None
    # A cancelled token refuses before any round trip: even a closed client is not touched.
    zk_client.stop()
    with pytest.raises(NotLeaderError, match="ended"):
        writer.create(f"{ROOT}/data/after-cancel")


def test_an_expired_lease_refuses_before_sending(
    zk_client: KazooClient, token: LeadershipToken
) -> None:
    writer = FencedWriter(zk_client, token, timeout=5, lease_valid=lambda: False)
    with pytest.raises(NotLeaderError, match="lease expired"):
        writer.create(f"{ROOT}/data/x")
    assert zk_client.exists(f"{ROOT}/data/x") is None


def test_concurrent_compare_and_set_updates_lose_nothing(
    zk_client: KazooClient, token: LeadershipToken, writer: FencedWriter
) -> None:
    path = f"{ROOT}/data/counter"
    writer.create_record(path, records.StormBase(name="wc", num_workers=0))
    threads, per_thread = 4, 25
    errors: list[BaseException] = []

    def bump(record: records.StormBase) -> None:
        record.num_workers += 1

    def work() -> None:
        try:
            for _ in range(per_thread):
                writer.update_record(path, records.StormBase.FromString, bump, attempts=1000)
        except BaseException as e:  # surfaced to the main thread below
            errors.append(e)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=120)
    assert not errors
    stored = records.StormBase.FromString(zk_client.get(path)[0])
    assert stored.num_workers == threads * per_thread
    assert stored.epoch == token.epoch


def test_take_office_bumps_the_epoch_and_prunes_history(zk_client: KazooClient) -> None:
    lock, token = _lead(zk_client, "a:1")
    first = token.epoch
    lock.release()
    lock2, token2 = _lead(zk_client, "b:2")
    assert token2.epoch == first + 1
    current, _ = read_leader_epoch(zk_client, Paths(ROOT))
    assert current is not None
    assert (current.epoch, current.holder, current.lock_node) == (
        token2.epoch,
        "b:2",
        token2.lock_node,
    )
    writer = FencedWriter(zk_client, token2, timeout=5)
    assert prune_epochs(writer, zk_client, Paths(ROOT), keep=1) == 1
    assert zk_client.get_children(f"{ROOT}/epochs") == [str(token2.epoch)]
    lock2.release()
    with pytest.raises(NotLeaderError):
        take_office(
            zk_client,
            Paths(ROOT),
            lock_node=token2.lock_node,
            holder="b:2",
            now_ms=_now_ms,
            timeout=5,
        )
    assert read_leader_epoch(zk_client, Paths(ROOT))[0] == current, (
        "a failed take-office writes nothing"
    )


REGISTER_AND_HANG = """
import sys
from fencing import Membership
from cluster.factory import make_kazoo_client
client = make_kazoo_client(sys.argv[1], session_timeout=float(sys.argv[2]))
client.start(timeout=10)
Membership(client, "n1:7000", timeout=5).register(sys.argv[3], b"old")
print(client.client_id[0], flush=True)
sys.stdin.read()
"""


def test_membership_touches_only_own_nodes_and_replaces_a_killed_processs_node(
    zk_hosts: str, zk_client: KazooClient
) -> None:
    path = f"{ROOT}/nimbuses/n1:7000"
    zk_client.ensure_path(f"{ROOT}/nimbuses")
    with python_child("-c", REGISTER_AND_HANG, zk_hosts, "30", path, stdin=True) as (_, out):
        old_session = int(out.readline())
    # Killed (kill -9): its session lives on in ZooKeeper for 30 s.
    assert zk_client.exists(path).ephemeralOwner == old_session
    mine = Membership(zk_client, "n1:7000", timeout=5)
    mine.register(path, b"new")  # a quick restart must not fail with NodeExists
    data, stat = zk_client.get(path)
    assert data == b"new"
    assert stat.ephemeralOwner == zk_client.client_id[0]
    with pytest.raises(MembershipError, match="not its own"):
        mine.register(f"{ROOT}/nimbuses/n2:7000", b"x")
    assert mine.unregister(path)
    assert zk_client.exists(path) is None


# -- a paused holder as a real process --------------------------------------------------


def _start_holder(hosts: str, *, raw: bool) -> tuple[subprocess.Popen[str], dict[str, object]]:
    cmd = [sys.executable, "-m", "tests.procs.fenced_holder", "--hosts", hosts, "--root", ROOT]
    cmd += ["--session-timeout", str(SESSION)] + (["--raw"] if raw else [])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the holder process died before taking office"
    return proc, json.loads(line)


def _ask(proc: subprocess.Popen[str], command: str) -> dict[str, int]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    summary: dict[str, int] = json.loads(proc.stdout.readline())
    return summary


@pytest.mark.parametrize("raw", [False, True], ids=["guarded", "zombie-unaware"])
def test_a_zombie_holder_resumed_after_expiry_applies_no_write(
    zk_hosts: str, zk_client: KazooClient, raw: bool
) -> None:
    zk_client.ensure_path(f"{ROOT}/data")
    holder, info = _start_holder(zk_hosts, raw=raw)
    try:
        assert _ask(holder, "write 3 before")["applied"] == 3
        os.kill(holder.pid, signal.SIGSTOP)
        # Paused past its session timeout: ZooKeeper removes its lock node.
        wait_until(lambda: zk_client.exists(str(info["lock_node"])) is None, timeout=SESSION * 5)
        _, new_token = _lead(zk_client, "new:1")
        assert new_token.epoch == int(str(info["epoch"])) + 1
        os.kill(holder.pid, signal.SIGCONT)
        summary = _ask(holder, "write 20 zombie after-new-session")
        assert summary["attempts"] == 20
        assert summary["applied"] == 0
        assert summary["not_leader"] == 20, summary
        if raw:
            # It never learnt it was deposed: ZooKeeper itself refused every write.
            assert summary["server_refused"] == 20, summary
        zombie_nodes = [c for c in zk_client.get_children(f"{ROOT}/data") if "zombie" in c]
        assert zombie_nodes == []
        writer = FencedWriter(zk_client, new_token, timeout=5)
        writer.create(f"{ROOT}/data/new-leader")
        assert zk_client.exists(f"{ROOT}/data/new-leader") is not None
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()


def _proxied_client(zk_server: object, zk_hosts: str) -> tuple[FaultProxy, KazooClient, str]:
    server_host, server_port = zk_server.connect_string.split(",")[0].split(":")  # type: ignore[attr-defined]
    chroot = zk_hosts[zk_hosts.index("/") :]
    proxy = FaultProxy(server_host, int(server_port))
    proxy.start()
    client = make_kazoo_client(f"{proxy.address}{chroot}", session_timeout=SESSION)
    client.start(timeout=10)
    return proxy, client, chroot


def test_a_write_in_flight_when_the_link_drops_is_unknown_and_never_applied_later(
    zk_server: object, zk_hosts: str, zk_client: KazooClient
) -> None:
    proxy, client, _ = _proxied_client(zk_server, zk_hosts)
    try:
        states: list[str] = []

        def on_state(state: str) -> bool:
            states.append(state)
            return False

        client.add_listener(on_state)
        lock, token = _lead(client)
        client.ensure_path(f"{ROOT}/data")
        writer = FencedWriter(client, token, timeout=1.0)
        first_session = client.client_id[0]
        proxy.blackhole("upstream")
        with pytest.raises(WriteOutcomeUnknown):
            writer.create(f"{ROOT}/data/in-flight")
        # Hold the cut past the session timeout: the server expires the session.
        wait_until(lambda: zk_client.exists(token.lock_node) is None, timeout=SESSION * 5)
        proxy.pass_through()
        proxy.reset()  # drop the connection that lost bytes, as a real cut would
        wait_until(
            lambda: (
                client.state == KazooState.CONNECTED
                and client.client_id is not None
                and client.client_id[0] != first_session
            ),
            timeout=20,
        )
        zk_client.sync(f"{ROOT}/data")
        assert zk_client.exists(f"{ROOT}/data/in-flight") is None
        assert KazooState.SUSPENDED in states
        # The old term's token can never write on the new session.
        stale = FencedWriter(client, LeadershipToken(token.lock_node, token.epoch), timeout=5)
        with pytest.raises(NotLeaderError):
            stale.create(f"{ROOT}/data/in-flight")
        assert zk_client.exists(f"{ROOT}/data/in-flight") is None
        lock.cancel()
    finally:
        client.stop()
        client.close()
        proxy.stop()


def test_a_lost_reply_is_unknown_even_though_the_write_landed(
    zk_server: object, zk_hosts: str, zk_client: KazooClient
) -> None:
    proxy, client, _ = _proxied_client(zk_server, zk_hosts)
    try:
        _, token = _lead(client)
        client.ensure_path(f"{ROOT}/data")
        writer = FencedWriter(client, token, timeout=1.0)
        proxy.blackhole("downstream")
        with pytest.raises(WriteOutcomeUnknown):
            writer.create(f"{ROOT}/data/landed")
        # "Unknown" means unknown: the caller reads back, and here the write did land.
        wait_until(lambda: zk_client.exists(f"{ROOT}/data/landed") is not None, timeout=5)
    finally:
        proxy.pass_through()
        proxy.reset()  # discarded replies leave a torn stream: drop it
        client.stop()
        client.close()
        proxy.stop()


def test_ops_are_plain_values() -> None:
    assert SetData("/a", b"x", 3) == SetData("/a", b"x", 3)
    different: list[object] = [Check("/a"), Delete("/a")]
    assert different[0] != different[1]


def test_take_office_refuses_while_the_last_terms_lock_node_is_held(
    zk_client: KazooClient,
) -> None:
    """A server that diverged from its quorum can show a replica the lock won while the
    last term's holder still holds it (seen in the chaos soak: two terms at once). The
    take-office multi-op checks at the quorum that the last term's lock node is gone."""
    first_lock, first = _lead(zk_client, "a:1")
    # Planted: a second lock node that "won" on a stale view, the first still held.
    second = zk_client.create(
        f"{ROOT}/leader-lock/stale-view-__lock__", b"b:2", ephemeral=True, sequence=True
    )
    with pytest.raises(WriteConflictError, match="still held"):
        take_office(
            zk_client, Paths(ROOT), lock_node=second, holder="b:2", now_ms=_now_ms, timeout=5
        )
    current, _ = read_leader_epoch(zk_client, Paths(ROOT))
    assert current is not None and current.epoch == first.epoch, "no second term began"
    assert zk_client.exists(first.lock_node) is not None
    # Once the last term's node is gone, the same replica takes office as usual.
    first_lock.release()
    epoch = take_office(
        zk_client, Paths(ROOT), lock_node=second, holder="b:2", now_ms=_now_ms, timeout=5
    )
    assert epoch == first.epoch + 1
    assert zk_client.exists(first.lock_node) is None, "the check leaves nothing behind"


def test_a_last_term_in_another_queue_does_not_block_taking_office(
    zk_client: KazooClient,
) -> None:
    """A ``/leader-epoch`` naming a lock node outside our queue (a lock folder since moved)
    is no term of this queue: checking that path would fail for ever on its missing
    parent and leave the cluster without a leader."""
    lock, token = _lead(zk_client, "a:1")
    record = records.LeaderEpoch(epoch=token.epoch, holder="old:1", lock_node="/gone/x")
    zk_client.set(f"{ROOT}/leader-epoch", record.SerializeToString())
    lock.release()
    _, again = _lead(zk_client, "b:2")
    assert again.epoch == token.epoch + 1


def test_membership_writes_only_its_own_persistent_nodes(zk_client: KazooClient) -> None:
    mine = Membership(zk_client, "sup-a", timeout=5)
    mine.put("/beats/t/sup-a-0", b"1")
    mine.put("/beats/t/sup-a-0", b"2")
    assert zk_client.get("/beats/t/sup-a-0")[0] == b"2"
    with pytest.raises(MembershipError):
        mine.put("/beats/t/sup-a-b-0", b"x")
    assert mine.remove("/beats/t/sup-a-0") is True
    assert mine.remove("/beats/t/sup-a-0") is False
