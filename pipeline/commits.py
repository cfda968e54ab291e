"""Publishing micro-batches under the worker's claim.

``Committer.for_sink(name)`` gives a sink a ``SinkFence``: ``gate(batch_id)`` before the
batch is evaluated (refuses at once, without a round trip, when the claim is at risk) and
``commit(batch_id)``, the one multi-op that checks the claim and creates
``/commits/<topology-id>/<sink>-<batch-id>``. The commit is the publication: the file sink
renames a batch into place only after it, so a reader that lists the sink's files sees
only committed batches. A commit that finds the marker already there (an earlier holder
committed the batch, then died before renaming) returns False: the batch is rolled
forward with the same rows Spark replays for it. Markers older than ``keep`` batches are
pruned, also under the claim.

A marker names the checkpoint lineage that ran its batch (``pipeline.lineage``). Before
the query starts, ``resume_from`` refuses a checkpoint that never planned the newest
committed batch of its sink (a fresh or foreign checkpoint would number other input with
the same batch ids), and a commit finding a marker of another lineage refuses the batch:
``UnaccountedBatchError``, reported as the worker's failure, never a silent skip.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from google.protobuf.message import DecodeError
from kazoo.exceptions import KazooException, NoNodeError

from cluster.api import records
from fencing import FencingError, WriteOutcomeUnknown
from fencing.claims import ClaimLostError, commit_marker, prune_markers
from pipeline.claims import ClaimEnd, SlotClaim
from pipeline.errors import SinkError, UnaccountedBatchError

log = logging.getLogger(__name__)


class FencedOffError(SinkError):
    """The worker's claim is lost or at risk: this batch was not published."""


class SinkFence:
    """What a sink calls per batch; bound to one sink of one topology."""

    def __init__(self, committer: Committer, sink: str) -> None:
        self._committer = committer
        self.sink = sink

    def gate(self, batch_id: int) -> None:
        """Raise ``FencedOffError`` when nothing may be published now (no round trip)."""
        self._committer.gate(self.sink, batch_id)

    def commit(self, batch_id: int) -> bool:
        """Commit the batch under the claim; False when it was committed before."""
        return self._committer.commit(self.sink, batch_id)


class Committer:
    """Commits batches of every sink of one topology under one claim."""

    def __init__(
        self,
        claim: SlotClaim,
        *,
        timeout: float,
        keep: int = 100,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1 commit marker, got {keep}")
        self._claim = claim
        self._timeout = timeout
        self._keep = keep
        self._wall_ms = wall_ms
        self._lock = threading.Lock()
        self._lineage: dict[str, str] = {}
        self.committed = 0

    def for_sink(self, sink: str) -> SinkFence:
        if not sink or "/" in sink:
            raise SinkError(f"a sink name must be non-empty without '/', got {sink!r}")
        return SinkFence(self, sink)

    def resume_from(self, sink: str, lineage: str, last_planned: int, where: str) -> None:
        """Adopt ``lineage`` for ``sink``'s commits, or raise ``UnaccountedBatchError``
        when its checkpoint (at ``where``, having planned up to ``last_planned``) cannot
        account for a batch committed in ZooKeeper."""
        newest = max(self._committed_batches(sink), default=-1)
        if newest > last_planned:
            planned = f"up to batch {last_planned}" if last_planned >= 0 else "no batch yet"
            raise UnaccountedBatchError(
                f"sink {sink!r}: batch {newest} was committed, but this worker's checkpoint "
                f"at {where} has planned {planned}: it would number other input with the "
                "ids of published batches, losing or repeating rows; nothing published. "
                "Resume from the checkpoint that committed them (a folder every supervisor "
                "reads: a file sink keeps it beside its output, other sinks need "
                "--checkpoint-dir), or kill and resubmit the topology"
            )
        with self._lock:
            self._lineage[sink] = lineage

    def _committed_batches(self, sink: str) -> list[int]:
        try:
            names = self._claim.client.get_children(
                self._claim.paths.commits_of(self._claim.topology_id)
            )
        except NoNodeError:
            return []
        except KazooException as e:
            raise SinkError(f"cannot read the commit markers of sink {sink!r}: {e}") from e
        return [
            int(name.rpartition("-")[2])
            for name in names
            if name.rpartition("-")[0] == sink and name.rpartition("-")[2].isdigit()
        ]

    def gate(self, sink: str, batch_id: int) -> None:
        refusal = self._claim.publish_refusal()
        if refusal is not None:
            log.warning("%s batch %d not published: %s", sink, batch_id, refusal)
            raise FencedOffError(f"sink {sink!r} batch {batch_id} not published: {refusal}")

    def commit(self, sink: str, batch_id: int) -> bool:
        self.gate(sink, batch_id)
        token = self._claim.token
        assert token is not None  # the gate refuses without a claim
        tid = self._claim.topology_id
        with self._lock:
            lineage = self._lineage.get(sink, "")
        record = records.BatchCommit(
            topology_id=tid,
            sink=sink,
            batch_id=batch_id,
            claim_epoch=token.epoch,
            supervisor_id=self._claim.supervisor_id,
            slot=self._claim.slot,
            pid=os.getpid(),
            time_ms=self._wall_ms(),
            lineage=lineage,
        ).SerializeToString(deterministic=True)
        marker = self._claim.paths.commit(tid, sink, batch_id)
        try:
            created = commit_marker(
                self._claim.client, token, marker, record, timeout=self._timeout
            )
        except ClaimLostError as e:
            self._claim.mark_lost(ClaimEnd.COMMIT_REFUSED, str(e))
            raise FencedOffError(f"sink {sink!r} batch {batch_id} not published: {e}") from e
        except (FencingError, KazooException) as e:
            # WriteOutcomeUnknown included: the marker may land, so the batch is not
            # published here; whoever replays it finds the marker and rolls it forward.
            raise FencedOffError(
                f"sink {sink!r} batch {batch_id} not published: commit failed: {e}"
            ) from e
        if created:
            log.info("committed %s batch %d (claim epoch %d)", sink, batch_id, token.epoch)
            with self._lock:
                self.committed += 1
                due = self.committed % max(1, self._keep // 4) == 0
            if due:
                self._prune(sink, batch_id)
        else:
            self._check_marker(marker, sink, batch_id, lineage)
            log.info("%s batch %d was committed before: rolling it forward", sink, batch_id)
        return created

    def _check_marker(self, marker: str, sink: str, batch_id: int, lineage: str) -> None:
        """A marker of another checkpoint lineage is a batch this worker cannot account for."""
        try:
            data, _ = self._claim.client.get(marker)
            found = records.BatchCommit.FromString(data).lineage
        except (KazooException, DecodeError) as e:
            raise FencedOffError(
                f"sink {sink!r} batch {batch_id} not published: cannot read its marker: {e}"
            ) from e
        if found and lineage and found != lineage:
            raise UnaccountedBatchError(
                f"sink {sink!r}: batch {batch_id} was committed by checkpoint lineage "
                f"{found}, not by this worker's ({lineage}): its rows differ; nothing "
                "published"
            )

    def _prune(self, sink: str, newest: int) -> None:
        """Delete this sink's markers more than ``keep`` batches old (best effort)."""
        tid = self._claim.topology_id
        token = self._claim.token
        if token is None:
            return
        try:
            names = self._claim.client.get_children(self._claim.paths.commits_of(tid))
        except (NoNodeError, KazooException) as e:
            log.info("no prune of %s commit markers: %s", sink, e)
            return
        old = [
            f"{self._claim.paths.commits_of(tid)}/{name}"
            for name in sorted(names)
            if name.rpartition("-")[0] == sink
            and name.rpartition("-")[2].isdigit()
            and int(name.rpartition("-")[2]) <= newest - self._keep
        ]
        try:
            pruned = prune_markers(self._claim.client, token, old, timeout=self._timeout)
        except (FencingError, WriteOutcomeUnknown, KazooException) as e:
            log.info("prune of %s commit markers deferred: %s", sink, e)
            return
        if pruned:
            log.info("pruned %d commit markers of %s", pruned, sink)
