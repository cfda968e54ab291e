"""Code sync on every replica: hold a verified copy of every topology's package.

Watches ``/storms`` and ``/code-distributor``; each pass reads both afresh and, for each
topology whose package this replica lacks, downloads it from a replica registered as a
holder (the next holder on failure; tenacity backs off with jitter between rounds),
verifies the digest, stores it and registers ``/code-distributor/<id>/<self>`` (a
persistent node: see ``Membership.hold``; readers count only live replicas). Packages
no topology references any more are removed after a grace period longer than the
replication wait, so a submission still waiting for replicas never loses its code.

The elector's code gate (``code_sync.gate``) shares what a pass learns: which ids are held
here, which holders we could not reach. The pass tells it; it asks for a pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch
from tenacity import RetryError, Retrying, stop_after_attempt, wait_random_exponential

from cluster.api import records
from cluster.paths import Paths
from cluster.reads import Holders, live_replicas, read_holders_of
from cluster.recordcache import RecordCache
from cluster.threads import guarded_thread
from code_sync import held as held_index
from code_sync.errors import CodeSyncError, PackageRejected, StoreError
from code_sync.gate import CodeGate
from code_sync.peer import fetch_from_peer
from code_sync.push import PushReceiver
from code_sync.store import CodeStore
from fencing import FencingError, Membership

log = logging.getLogger(__name__)

#: How long a pass waits for the record cache's first load before it gives up (and retries).
RECORDS_WAIT = 60.0
_NO_CONNECTION = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

Fetch = Callable[[str, str], Iterator[bytes]]


@dataclass
class SyncReport:
    """What one pass did; the daemon logs it and tests assert on it."""

    downloaded: list[str] = field(default_factory=list)
    registered: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # topologies in /storms we still lack
    pending: list[str] = field(default_factory=list)  # in-flight folders with no holder yet


class CodeSyncer:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        store: CodeStore,
        storms: RecordCache[records.StormBase],
        *,
        interval: float,
        gc_grace: float,
        code_wait: float,
        download_timeout: float = 300.0,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self._paths = paths
        self._id = replica_id
        self.store = store
        self.storms = storms
        # Topology ids whose own holder node is known to exist (persistent nodes: this
        # survives sessions). Only the pass (under ``_pass_lock``) touches it.
        self._registered: set[str] = set()
        self._saved: held_index.Index | None = None  # what the on-disk index says
        self._membership = Membership(client, replica_id, timeout=10.0)
        self._interval = interval
        self._gc_grace = gc_grace
        self._fetch: Fetch = fetch or (
            lambda address, digest: fetch_from_peer(address, digest, timeout=download_timeout)
        )
        self._clock = clock
        self._on_change = on_change
        self._unreferenced_since: dict[str, float] = {}
        self._orphan_since: dict[str, float] = {}
        self._lag = 0
        self.last_report: SyncReport | None = None  # the latest pass (observability, tests)
        self._wake = threading.Event()
        self._force_pass = False  # the gate found code missing or damaged: look again
        self._force_guard = threading.Lock()
        self.gate = CodeGate(
            client,
            paths,
            replica_id,
            store,
            storms,
            code_wait=code_wait,
            clock=clock,
            request_pass=self.request_pass,
        )
        # Packages the leader pushes (``PushCode``) land in the same store and register
        # the same node as a download; a pass then takes them in.
        self.push_receiver = PushReceiver(
            client, paths, replica_id, store, on_stored=self.request_pass
        )
        self._stop = threading.Event()
        self._pass_lock = threading.Lock()
        self._thread = guarded_thread("code-sync", self._run, self._stop)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        ChildrenWatch(self._client, self._paths.storms, self._poke)
        ChildrenWatch(self._client, self._paths.code_distributor, self._poke)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def poke(self) -> None:
        """Run a pass now (e.g. the leader just registered a new package)."""
        self._wake.set()

    @property
    def lag(self) -> int:
        """Topologies in ``/storms`` whose code this replica lacked at the last pass."""
        return self._lag

    # -- one pass ----------------------------------------------------------------------------

    def prime(self) -> int:
        """Take what the on-disk index says we hold, for each digest the store verifies:
        the code gate can then pass at start without reading every record first.
        Returns how many topologies it primed."""
        saved = held_index.load(self.store.root)
        good = {d for d in set(saved.held.values()) if self._has(d)}
        primed = {tid: d for tid, d in saved.held.items() if d in good}
        with self._pass_lock:
            self.gate.prime(primed)
            if saved.replica == self._id:  # registrations are this identity's own
                self._registered |= saved.registered
            self._saved = saved
        return len(primed)

    def _has(self, digest: str) -> bool:
        try:
            return self.store.has(digest)
        except StoreError as e:
            log.warning("cannot check package %s: %s", digest[:12], e)
            return False

    def sync_once(self) -> SyncReport:
        with self._pass_lock:
            if not self.storms.wait_loaded(RECORDS_WAIT):
                # A pass over a partial view would take unloaded topologies for gone ones.
                raise ConnectionLoss("the record cache is not loaded yet")
            report = self._sync_once()
            now = held_index.Index(self.gate.held_ids(), frozenset(self._registered), self._id)
            if now != self._saved:
                held_index.save(self.store.root, now)
                self._saved = now
            return report

    def _sync_once(self) -> SyncReport:
        report = SyncReport()
        storms = self.storms.items()
        wanted: dict[str, str] = {tid: base.digest for tid, base in storms.items() if base.digest}
        in_flight = set(self._client.get_children(self._paths.code_distributor)) - set(storms)
        live = live_replicas(self._client, self._paths)
        holders = {tid: read_holders_of(self._client, self._paths, tid, live) for tid in in_flight}
        for tid, h in holders.items():
            if h.digest:
                wanted[tid] = h.digest  # a submission still gathering replicas
            else:
                report.pending.append(tid)
                self._watch_first_holder(tid, live)
        present: dict[str, bool] = {}
        for digest in set(wanted.values()):
            present[digest] = self.store.has(digest)
        self.gate.set_held({tid: d for tid, d in wanted.items() if present[d] and tid in storms})
        self._verify_registrations(wanted, present)
        for topology_id, digest in sorted(wanted.items()):
            if self._stop.is_set():
                break
            if not present[digest]:
                if topology_id in self._registered:
                    # Our persistent node says we hold code we no longer have (a wiped
                    # or damaged store): withdraw it before anyone fetches from us.
                    self._release(topology_id)
                held = holders.get(topology_id) or read_holders_of(
                    self._client, self._paths, topology_id, live
                )
                peers = [r for r in held.replicas if r != self._id]
                error = self._download(topology_id, digest, peers)
                if error is not None:
                    report.failed[topology_id] = error
                    if topology_id in storms:
                        report.missing.append(topology_id)
                    continue
                report.downloaded.append(topology_id)
                present[digest] = True
                if topology_id in storms:
                    self.gate.add_held(topology_id, digest)
            if topology_id not in self._registered:
                try:
                    self._membership.hold(
                        self._paths.code_holder(topology_id, self._id), digest.encode()
                    )
                    self._registered.add(topology_id)
                    report.registered.append(topology_id)
                except (FencingError, KazooException) as e:
                    report.failed[topology_id] = f"could not register: {e}"
        self._registered.intersection_update(set(wanted) | set(holders))
        self._collect(storms.keys(), holders, set(wanted.values()), report)
        self.last_report = report
        lag = len(report.missing)
        if lag != self._lag or report.downloaded or report.registered:
            self._lag = lag
            if self._on_change is not None:
                self._on_change()
        return report

    def _verify_registrations(self, wanted: dict[str, str], present: dict[str, bool]) -> None:
        """Learn which of our persistent holder nodes exist, pipelined, for ids not yet known.

        After a restart this is 10,000 reads in flight at once (about a second), not
        10,000 sequential writes; a node that exists is ours from an earlier run.
        """
        unknown = [tid for tid in wanted if tid not in self._registered]
        if not unknown:
            return
        pending = [
            (tid, self._client.exists_async(self._paths.code_holder(tid, self._id)))
            for tid in unknown
        ]
        absent: list[str] = []
        for tid, result in pending:
            try:
                stat = result.get(timeout=30)
            except KazooException:
                continue  # unknown: the pass writes it, which is idempotent
            if stat is not None:
                self._registered.add(tid)
            elif present.get(wanted[tid]):
                absent.append(tid)
        if absent:  # held here, not registered yet: register them all at once
            by_path = {self._paths.code_holder(tid, self._id): tid for tid in absent}
            try:
                held = self._membership.hold_many(
                    [(path, wanted[tid].encode()) for path, tid in by_path.items()]
                )
            except (FencingError, KazooException) as e:
                log.info("could not register holders in bulk (one by one instead): %s", e)
                return
            self._registered.update(by_path[path] for path in held)

    def _watch_first_holder(self, topology_id: str, live: frozenset[str]) -> None:
        """Force a pass when a live holder appears in an in-flight folder seen without one.

        The pass-skipping marker covers ``/code-distributor``'s children, not each
        folder's: without this, a holder registered just after its folder appeared would
        wait for the next periodic full pass (up to 30 s: a submission's replication wait).
        Holders that are down do not count (a dead one coming back changes ``/nimbuses``,
        which the marker covers); counting them would run pass after pass for nothing.
        Connection trouble propagates: the pass fails and the loop looks again.
        """
        try:
            children = self._client.get_children(
                self._paths.code_holders(topology_id), watch=self._on_holders_changed
            )
        except NoNodeError:
            return
        if any(c in live for c in children):  # one arrived between the read and the watch
            self.request_pass()

    def _on_holders_changed(self, event: object) -> None:
        self.request_pass()

    def request_pass(self) -> None:
        """A full pass soon, in the background, even if the marker says nothing changed
        (at start; from the gate; from a watch: any thread)."""
        with self._force_guard:
            self._force_pass = True
        self._wake.set()

    def _release(self, topology_id: str) -> None:
        try:
            self._membership.release(self._paths.code_holder(topology_id, self._id))
            self._registered.discard(topology_id)
        except (FencingError, KazooException) as e:
            log.info("could not drop code-distributor node of %s: %s", topology_id, e)

    def _download(self, topology_id: str, digest: str, holders: list[str]) -> str | None:
        """Fetch from the holders in turn, a few rounds with jittered backoff; None on success."""
        if not holders:
            return "no replica holds this package"
        last: list[str] = []

        def one_round() -> None:
            for holder in holders:
                try:
                    # The digest names a package the leader validated at submit; matching
                    # SHA-256 means the same bytes, so the layout check is not redone.
                    self.store.write(
                        self._fetch(holder, digest), expected_digest=digest, validate=False
                    )
                    log.info("fetched %s (%s) from %s", topology_id, digest[:12], holder)
                    self.gate.mark_reachable(holder)
                    return
                except StoreError:
                    raise  # local disk trouble: no other holder helps now
                except grpc.RpcError as e:
                    if e.code() in _NO_CONNECTION:
                        self.gate.mark_unreachable(holder)
                    last.append(f"{holder}: {e}")
                except (PackageRejected, CodeSyncError, OSError) as e:
                    last.append(f"{holder}: {e}")
            raise CodeSyncError("; ".join(last[-len(holders) :]))

        try:
            Retrying(
                stop=stop_after_attempt(3),
                wait=wait_random_exponential(multiplier=0.1, max=1.0),
                reraise=True,
            )(one_round)
        except StoreError as e:
            return f"local store: {e}"
        except (CodeSyncError, RetryError) as e:
            return str(e)
        return None

    def _collect(
        self,
        live_ids: Iterable[str],
        holders: dict[str, Holders],
        referenced: set[str],
        report: SyncReport,
    ) -> None:
        now = self._clock()
        for digest in self.store.digests():
            if digest in referenced:
                self._unreferenced_since.pop(digest, None)
                continue
            since = self._unreferenced_since.setdefault(digest, now)
            if now - since >= self._gc_grace:
                self.store.remove(digest)
                self._unreferenced_since.pop(digest, None)
                report.removed.append(digest)
        live = set(live_ids)
        for topology_id, held in holders.items():
            if topology_id in live or self._id not in held.replicas:
                self._orphan_since.pop(topology_id, None)
                continue
            since = self._orphan_since.setdefault(topology_id, now)
            if now - since >= self._gc_grace:
                self._release(topology_id)
                self._orphan_since.pop(topology_id, None)

    # -- internals -----------------------------------------------------------------------------

    def _poke(self, children: list[str]) -> None:
        self._wake.set()

    def _marker(self) -> tuple[int, bool, int, int]:
        """What a pass depends on from ZooKeeper, in two small round trips: the child
        versions of ``/storms`` (as the watch-fed cache reflects it), of
        ``/code-distributor`` (in-flight submissions) and of ``/nimbuses`` (who can serve
        a download). A topology's digest never changes."""
        _, cversion, records_read = self.storms.snapshot()
        holders = self._client.exists(self._paths.code_distributor)
        nimbuses = self._client.exists(self._paths.nimbuses)
        return (
            cversion,
            records_read,
            int(holders.cversion) if holders is not None else -1,
            int(nimbuses.cversion) if nimbuses is not None else -1,
        )

    def _run(self) -> None:
        quiet: tuple[int, bool, int, int] | None = None  # marker of the last clean full pass
        last_full = self._clock()
        # A full pass anyway now and then: the store's own files are re-checked, and the
        # garbage collection's clock advances well inside its grace period.
        full_every = max(self._interval, min(30.0, self._gc_grace / 4))
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                marker = self._marker()
                with self._force_guard:  # a request landing now is kept, not lost
                    forced, self._force_pass = self._force_pass, False
                if marker == quiet and not forced and self._clock() - last_full < full_every:
                    continue  # nothing changed: a pass over 10,000 topologies would find so
                report = self.sync_once()
            except KazooException as e:
                log.info("code sync pass interrupted by ZooKeeper: %s", type(e).__name__)
                quiet = None  # whatever this pass was to do (even a forced one) is still due
                continue
            last_full = self._clock()
            clean = not report.failed and not report.missing and not report.downloaded
            quiet = marker if clean and marker[1] else None
            if report.failed:
                log.warning("code sync: %s", report.failed)
