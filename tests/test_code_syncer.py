"""The code syncer's pass loop on a real ZooKeeper, in process (downloads from a local store)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from cluster.recordcache import RecordCache
from code_sync.package import make_package
from code_sync.store import CodeStore
from code_sync.syncer import CodeSyncer
from fencing import Membership
from tests.waiting import wait_until

ROOT = "/storm"
PATHS = Paths(ROOT)


def _make_folders(zk_client: KazooClient) -> None:
    """The folders a syncer reads, as a replica's start makes them."""
    for folder in (PATHS.storms, PATHS.code_distributor, PATHS.nimbuses):
        zk_client.ensure_path(folder)


def _store_wc(store: CodeStore, tmp_path: Path) -> str:
    """A one-file package written into ``store``; its digest."""
    package = make_package({"topology.py": b"# wc\n"}, tmp_path / "wc.zip")
    return store.write([package.read_bytes()], expected_digest=None).digest


def test_a_holder_registered_just_after_its_folder_appeared_is_replicated_at_once(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    """The race that once held a resubmission for the whole replication wait (30 s).

    A follower's pass saw ``/code-distributor/<id>`` before the leader's holder node in
    it; the pass found nothing to fetch, and the next passes were skipped because
    ``/code-distributor``'s own children had not changed since.
    """
    _make_folders(zk_client)
    zk_client.create(PATHS.nimbus("leader"), b"", ephemeral=True)
    source = CodeStore(tmp_path / "leader", max_package_bytes=1 << 20)
    digest = _store_wc(source, tmp_path)

    def fetch(address: str, wanted: str) -> Iterator[bytes]:
        assert address == "leader"
        return source.read_chunks(wanted)

    storms = RecordCache(zk_client, PATHS.storms, records.StormBase.FromString)
    storms.start()
    # A full pass on the timer only every 30 s: what a prompt catch-up must not wait for.
    store = CodeStore(tmp_path / "follower", max_package_bytes=1 << 20)
    syncer = CodeSyncer(
        zk_client, Paths(ROOT), "follower", store, storms,
        interval=0.05, gc_grace=600.0, code_wait=30.0, fetch=fetch,
    )  # fmt: skip
    syncer.start()
    try:
        topology = "wc-1-1"
        zk_client.create(PATHS.code_holders(topology), b"")
        wait_until(
            lambda: syncer.last_report is not None and topology in syncer.last_report.pending,
            timeout=10,
            message="a pass that saw the empty folder",
        )
        Membership(zk_client, "leader", timeout=5).hold(
            PATHS.code_holder(topology, "leader"), digest.encode()
        )
        wait_until(
            lambda: zk_client.exists(PATHS.code_holder(topology, "follower")) is not None,
            timeout=5,
            message="the follower fetching and registering the package",
        )
        assert syncer.store.has(digest)
    finally:
        syncer.stop()


def test_a_first_holder_creates_its_folder_in_the_same_transaction(
    zk_client: KazooClient,
) -> None:
    """Nobody can see a submission's folder without its first holder in it."""
    zk_client.ensure_path(PATHS.code_distributor)
    membership = Membership(zk_client, "leader", timeout=5)
    membership.hold(PATHS.code_holder("wc-1-1", "leader"), b"d" * 64)
    _, folder = zk_client.get(PATHS.code_holders("wc-1-1"))
    _, holder = zk_client.get(PATHS.code_holder("wc-1-1", "leader"))
    assert folder.czxid == holder.czxid  # one transaction: one zxid
    # A second holder joins the existing folder; holding again changes nothing.
    Membership(zk_client, "follower", timeout=5).hold(
        PATHS.code_holder("wc-1-1", "follower"), b"d" * 64
    )
    membership.hold(PATHS.code_holder("wc-1-1", "leader"), b"d" * 64)
    assert sorted(zk_client.get_children(PATHS.code_holders("wc-1-1"))) == ["follower", "leader"]


class _StaleView:
    """A view of ``/storms`` frozen before a kill: pure data, no I/O."""

    def __init__(self, records_by_id: dict[str, records.StormBase]) -> None:
        self._records = records_by_id

    def items(self) -> dict[str, records.StormBase]:
        return dict(self._records)

    def get(self, name: str) -> records.StormBase | None:
        return self._records.get(name)

    def snapshot(self) -> tuple[frozenset[str], int, bool]:
        return frozenset(self._records), -1, True


def test_the_code_missing_duty_never_undoes_a_kill_it_has_not_seen_yet(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    from code_sync.duty import CodeMissingDuty
    from tests.test_scheduler_duty import lead

    lock, writer = lead(zk_client, "leader:1")
    try:
        digest = "ab" * 32  # a package nobody holds
        active = records.StormBase(name="wc", status=records.ACTIVE, digest=digest)
        writer.create_record(PATHS.storm("wc-1-1"), active)
        killed = records.StormBase(name="wc", status=records.KILLED, digest=digest)
        writer.set_record(PATHS.storm("wc-1-1"), killed, version=0)  # unseen by the view
        view = _StaleView({"wc-1-1": active})
        store = CodeStore(tmp_path / "store", max_package_bytes=1 << 20)
        syncer = CodeSyncer(
            zk_client, Paths(ROOT), "leader:1", store, view,  # type: ignore[arg-type]
            interval=1.0, gc_grace=600.0, code_wait=0.0,
        )  # fmt: skip
        duty = CodeMissingDuty(zk_client, Paths(ROOT), "leader:1", syncer, writer, interval=1.0)
        assert syncer.gate.request_missing() == []  # no live holder, code_wait 0: it does not block
        assert syncer.gate.code_abandoned("wc-1-1"), "the duty would act on this view"
        assert duty.run_once() == []
        data, stat = zk_client.get(PATHS.storm("wc-1-1"))
        assert records.StormBase.FromString(data).status == records.KILLED, "kill overwritten"
        assert stat.version == 1, "nothing written at all"
        assert not zk_client.exists(f"{PATHS.errors}/wc-1-1"), "no error recorded either"
    finally:
        lock.release()


def test_a_deactivated_topology_whose_code_comes_back_stays_deactivated(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    from code_sync.duty import CodeMissingDuty
    from tests.test_scheduler_duty import lead

    lock, writer = lead(zk_client, "leader:1")
    storms = RecordCache(zk_client, PATHS.storms, records.StormBase.FromString)
    storms.start()
    try:
        package = make_package({"topology.py": b"# wc\n"}, tmp_path / "wc.zip").read_bytes()
        digest = hashlib.sha256(package).hexdigest()
        paused = records.StormBase(name="wc", status=records.INACTIVE, digest=digest)
        writer.create_record(PATHS.storm("wc-1-1"), paused)
        store = CodeStore(tmp_path / "store", max_package_bytes=1 << 20)
        syncer = CodeSyncer(
            zk_client, Paths(ROOT), "leader:1", store, storms,
            interval=1.0, gc_grace=600.0, code_wait=0.0,
        )  # fmt: skip
        duty = CodeMissingDuty(zk_client, Paths(ROOT), "leader:1", syncer, writer, interval=1.0)

        def status() -> int:
            base = storms.get("wc-1-1")
            return -1 if base is None else int(base.status)

        wait_until(lambda: status() == records.INACTIVE, timeout=10)
        assert duty.run_once() == ["wc-1-1: CODE_MISSING"]
        wait_until(lambda: status() == records.CODE_MISSING, timeout=10)
        store.write([package], expected_digest=digest)  # a replica with the code is back
        assert duty.run_once() == ["wc-1-1: code back, status restored"]
        wait_until(lambda: status() == records.INACTIVE, timeout=10, message="INACTIVE again")
    finally:
        lock.release()


def test_a_live_holder_we_cannot_download_from_does_not_block_the_gate_past_code_wait(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    """A holder's session in ``/nimbuses`` proves it reaches ZooKeeper, not that its code
    can be downloaded (gRPC between the replicas cut): once a download from it fails to
    connect, ``code_wait`` runs, so the cluster can still elect."""
    _make_folders(zk_client)
    holder = "127.0.0.1:1"  # a live session, but nothing listens at its address
    zk_client.create(PATHS.nimbus(holder), b"", ephemeral=True)
    digest = "ab" * 32
    base = records.StormBase(name="wc", status=records.ACTIVE, digest=digest)
    zk_client.create(PATHS.storm("wc-1-1"), base.SerializeToString())
    zk_client.create(PATHS.code_holder("wc-1-1", holder), digest.encode(), makepath=True)
    storms = RecordCache(zk_client, PATHS.storms, records.StormBase.FromString)
    storms.start()
    storms.wait_loaded(10)
    now = [0.0]
    store = CodeStore(tmp_path / "store", max_package_bytes=1 << 20)
    syncer = CodeSyncer(
        zk_client, PATHS, "me:1", store, storms,
        interval=1.0, gc_grace=600.0, code_wait=5.0, clock=lambda: now[0],
    )  # fmt: skip
    assert syncer.gate.request_missing() == ["wc-1-1"], "a live holder: worth waiting for"
    report = syncer.sync_once()
    assert report.failed, "the download cannot connect"
    assert syncer.gate.request_missing() == ["wc-1-1"], "code_wait starts now"
    now[0] += 6.0
    assert syncer.gate.request_missing() == []
    assert syncer.gate.code_abandoned("wc-1-1")


def test_a_restarted_replica_passes_its_gate_from_its_own_index(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    """The held index written by a pass lets the next process pass its code gate before
    its record cache has read anything; a digest the store no longer verifies is not
    taken on trust."""
    _make_folders(zk_client)
    store = CodeStore(tmp_path / "store", max_package_bytes=1 << 20)
    digest = _store_wc(store, tmp_path)
    base = records.StormBase(name="wc", status=records.ACTIVE, digest=digest)
    for i in range(3):
        zk_client.create(PATHS.storm(f"wc-{i}-1"), base.SerializeToString())

    def syncer() -> CodeSyncer:
        storms = RecordCache(zk_client, PATHS.storms, records.StormBase.FromString)
        return CodeSyncer(
            zk_client, PATHS, "me:1", store, storms,
            interval=1.0, gc_grace=600.0, code_wait=60.0,
        )  # fmt: skip

    first = syncer()
    first.storms.start()
    first.sync_once()  # writes the index
    second = syncer()  # its cache never started: only the index can tell
    assert second.prime() == 3
    assert second.gate.request_missing() == []
    (store.root / digest).write_bytes(b"damaged")
    third = syncer()
    assert third.prime() == 0, "a digest the store cannot verify is not primed"


def test_the_gates_memory_of_holderless_topologies_forgets_removed_ones(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    _make_folders(zk_client)
    base = records.StormBase(name="gone", status=records.ACTIVE, digest="cd" * 32)
    storms = RecordCache(zk_client, PATHS.storms, records.StormBase.FromString)
    store = CodeStore(tmp_path / "store", max_package_bytes=1 << 20)
    now = [0.0]
    syncer = CodeSyncer(
        zk_client, PATHS, "me:1", store, storms,
        interval=1.0, gc_grace=600.0, code_wait=5.0, clock=lambda: now[0],
    )  # fmt: skip
    for i in range(50):
        zk_client.create(PATHS.storm(f"gone-{i}-1"), base.SerializeToString())
    assert len(syncer.gate.request_missing()) == 50  # no holder anywhere: code_wait runs for each
    now[0] += 6.0
    assert syncer.gate.request_missing() == [] and syncer.gate.code_abandoned("gone-0-1")
    for i in range(50):
        zk_client.delete(PATHS.storm(f"gone-{i}-1"))
    assert syncer.gate.request_missing() == []
    assert not syncer.gate.code_abandoned("gone-0-1"), "a removed topology is forgotten"


def test_a_code_dir_taken_over_by_another_address_registers_its_own_holder_nodes(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    """The index's registrations belong to the identity that made them: a replica started
    on the same code dir under a new address must register itself, or no live replica
    would be named as a holder and nobody could fetch from it."""
    _make_folders(zk_client)
    store = CodeStore(tmp_path / "store", max_package_bytes=1 << 20)
    digest = _store_wc(store, tmp_path)
    base = records.StormBase(name="wc", status=records.ACTIVE, digest=digest)
    zk_client.create(PATHS.storm("wc-1-1"), base.SerializeToString())

    def syncer(replica: str) -> CodeSyncer:
        storms = RecordCache(zk_client, PATHS.storms, records.StormBase.FromString)
        storms.start()
        return CodeSyncer(
            zk_client, PATHS, replica, store, storms,
            interval=1.0, gc_grace=600.0, code_wait=60.0,
        )  # fmt: skip

    syncer("old:1").sync_once()
    assert zk_client.get_children(PATHS.code_holders("wc-1-1")) == ["old:1"]
    moved = syncer("new:2")
    assert moved.prime() == 1
    moved.sync_once()
    assert sorted(zk_client.get_children(PATHS.code_holders("wc-1-1"))) == ["new:2", "old:1"]
