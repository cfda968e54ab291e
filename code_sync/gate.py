"""The code gate: may this replica lead, or does it lack code a live replica could give it?

The gate owns the state the sync pass and the gate share (which topologies are known to be
held here, how long each topology has had no live holder, which holders we could not
reach), behind one lock held only around dict operations, never around I/O: the gate runs
on the elector's and the leader's duty threads while a pass runs on its own.

It answers from what it already knows: the ids known to be held here (primed from the
on-disk index, kept by each pass), the watch-fed record cache of ``/storms`` and one stat
of ``/storms``. It lists ``/storms`` only when that stat shows the cache behind, and reads
ZooKeeper further only for ids not yet known to be held. Asking it is not free of effects:
it learns held ids, starts the ``code_wait`` clock of topologies no live replica holds, and
asks the sync pass to run when code is lacking or damaged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult

from cluster.api import records
from cluster.paths import Paths
from cluster.reads import live_replicas
from cluster.recordcache import RecordCache
from code_sync.store import CodeStore

#: How long a holder we could not connect to is not counted as able to serve its code.
UNREACHABLE_HOLD = 30.0


class CodeGate:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        store: CodeStore,
        storms: RecordCache[records.StormBase],
        *,
        code_wait: float,
        clock: Callable[[], float],
        request_pass: Callable[[], None],
    ) -> None:
        self._client = client
        self._paths = paths
        self._id = replica_id
        self.store = store
        self.storms = storms
        self._code_wait = code_wait
        self._clock = clock
        self._request_pass = request_pass
        # Ids known to be held here with their digest; since when each topology has had
        # no live holder; holders whose download failed for want of a connection, with
        # when (a live session in /nimbuses proves a holder reaches ZooKeeper, not that we
        # reach it).
        self._held_ids: dict[str, str] = {}
        self._holderless_since: dict[str, float] = {}
        self._unreachable: dict[str, float] = {}
        self._state = threading.Lock()

    # -- asked by the elector and the CODE_MISSING duty ------------------------------------

    def request_missing(self, storms: IAsyncResult | None = None) -> list[str]:
        """The topologies that block leadership, after asking the sync pass for them.

        Blocking: in ``/storms`` now, code not held here. A topology whose code no live
        replica has held for longer than ``code_wait`` does not block (Storm's STORM-3664:
        a cluster must always be able to elect); the leader then marks it CODE_MISSING.
        Each call starts or clears those ``code_wait`` clocks, records ids found held, and
        requests a sync pass when anything blocks or a held copy was found damaged.

        "Now" costs one stat of ``/storms`` when the watch-fed cache's listing is current
        (same child version: the children are exactly these, whether or not every record
        has been read yet, so a replica still loading takes office without listing 10,000
        topologies). Only ids not yet known to be held here are examined one by one, each
        digest from the cache or, not read yet, from ZooKeeper. ``storms``: that stat,
        already sent (``exists_async``; the elector sends it behind the lock's listing).
        """
        ids, cversion, _ = self.storms.snapshot()
        stat = self._client.exists(self._paths.storms) if storms is None else storms.get()
        if stat is None:
            return []
        if int(stat.cversion) != cversion:
            ids = frozenset(self._client.get_children(self._paths.storms))
        with self._state:
            for gone in [tid for tid in self._holderless_since if tid not in ids]:
                del self._holderless_since[gone]  # bounded by the live topologies
            held_ids = dict(self._held_ids)
        # One stat per distinct package (``store.has`` re-hashes only a changed file): a
        # copy damaged since the last pass must block here, not after we lead.
        damaged = {d for d in set(held_ids.values()) if not self.store.has(d)}
        if damaged:
            held_ids = {tid: d for tid, d in held_ids.items() if d not in damaged}
            with self._state:
                for tid, d in list(self._held_ids.items()):
                    if d in damaged:
                        del self._held_ids[tid]
        unknown = ids.difference(held_ids)
        if not unknown:
            return []
        blocking: list[str] = []
        now = self._clock()
        held: dict[str, bool] = {}  # many topologies may share one package: check it once
        live: frozenset[str] | None = None
        for topology_id in unknown:
            digest = self._digest_of(topology_id)
            if digest is None:
                continue  # removed while we looked
            if digest and digest not in held:
                held[digest] = self.store.has(digest)
            if digest and held[digest]:
                with self._state:
                    self._held_ids[topology_id] = digest
                    self._holderless_since.pop(topology_id, None)
                continue
            if live is None:
                live = live_replicas(self._client, self._paths)
            holders = [r for r in self._read_holder_names(topology_id) if r != self._id]
            if any(r in live and self.reachable(r, now) for r in holders):
                with self._state:
                    self._holderless_since.pop(topology_id, None)
                blocking.append(topology_id)
                continue
            with self._state:
                since = self._holderless_since.setdefault(topology_id, now)
            if now - since < self._code_wait:
                blocking.append(topology_id)
        if blocking or damaged:
            self._request_pass()
        return sorted(blocking)

    def request_all_code(self, storms: IAsyncResult | None = None) -> bool:
        """True when nothing blocks leadership; else the sync pass was asked for it
        (``request_missing``). The elector's code gate."""
        return not self.request_missing(storms)

    def code_abandoned(self, topology_id: str) -> bool:
        """True once no replica has held this topology's code for longer than ``code_wait``."""
        with self._state:
            since = self._holderless_since.get(topology_id)
        return since is not None and self._clock() - since >= self._code_wait

    def reachable(self, holder: str, now: float) -> bool:
        """False while our last download from ``holder`` failed to connect, within
        ``UNREACHABLE_HOLD`` seconds: such a holder does not make a topology block the
        gate, so ``code_wait`` runs and the cluster can still elect."""
        with self._state:
            since = self._unreachable.get(holder)
        return since is None or now - since >= UNREACHABLE_HOLD

    # -- told by the sync pass ---------------------------------------------------------------

    def held_ids(self) -> dict[str, str]:
        """A copy: topology id -> digest of each topology known to be held here."""
        with self._state:
            return dict(self._held_ids)

    def set_held(self, held: dict[str, str]) -> None:
        """What a full pass found held (it replaces what the gate knew)."""
        with self._state:
            self._held_ids = dict(held)

    def add_held(self, topology_id: str, digest: str) -> None:
        """A topology whose package the pass just stored."""
        with self._state:
            self._held_ids[topology_id] = digest

    def prime(self, held: dict[str, str]) -> None:
        """What the on-disk index says is held (verified); what a pass learned wins."""
        with self._state:
            self._held_ids = {**held, **self._held_ids}

    def mark_reachable(self, holder: str) -> None:
        with self._state:
            self._unreachable.pop(holder, None)

    def mark_unreachable(self, holder: str) -> None:
        now = self._clock()
        with self._state:
            self._unreachable[holder] = now
            old = [h for h, t in self._unreachable.items() if now - t > 10 * UNREACHABLE_HOLD]
            for stale in old:
                del self._unreachable[stale]  # bounded: old marks are forgotten

    # -- reads ---------------------------------------------------------------------------------

    def _digest_of(self, topology_id: str) -> str | None:
        """A topology's digest: from the cache (it never changes for an id), else read now."""
        base = self.storms.get(topology_id)
        if base is not None:
            return base.digest
        try:
            data, _ = self._client.get(self._paths.storm(topology_id))
        except NoNodeError:
            return None
        try:
            return records.StormBase.FromString(data).digest
        except DecodeError:
            return ""

    def _read_holder_names(self, topology_id: str) -> list[str]:
        """Holders registered for a topology; connection trouble propagates (it must not
        read as "nobody holds it", which could let the code gate pass without the code)."""
        try:
            names: list[str] = self._client.get_children(self._paths.code_holders(topology_id))
        except NoNodeError:
            return []
        return names
