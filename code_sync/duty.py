"""Leader-only: mark topologies whose code is gone CODE_MISSING, and revive them.

Runs while the leader's token is alive. A topology no live replica has held for longer
than ``code_wait`` did not block the election (see ``CodeGate.request_missing``); here the
leader records that, fenced: status CODE_MISSING plus an error under
``/errors/<id>/nimbus``. It never disappears, and once a replica with its code returns
(the leader syncs it like any replica) it gets back the status it had (a deactivated
topology stays deactivated).
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from code_sync.syncer import CodeSyncer
from fencing import FencedWriter, run_duty
from fencing.error_log import append_error

log = logging.getLogger(__name__)

COMPONENT = "nimbus"


class _Unchanged(Exception):
    """The fresh record already says otherwise: write nothing."""


class CodeMissingDuty:
    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        replica_id: str,
        syncer: CodeSyncer,
        writer: FencedWriter,
        *,
        interval: float,
    ) -> None:
        self._client = client
        self._paths = paths
        self._id = replica_id
        self._syncer = syncer
        self._writer = writer
        self._interval = interval
        self._thread = threading.Thread(target=self._run, name="code-missing", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def run_once(self) -> list[str]:
        """One pass; returns the changes made, in words."""
        changes: list[str] = []
        storms = self._syncer.storms.items()
        present: dict[str, bool] = {}  # one check per package, not per topology
        for base in storms.values():
            if base.digest and base.digest not in present:
                present[base.digest] = self._syncer.store.has(base.digest)
        lacking = any(not present.get(b.digest, False) for b in storms.values())
        if lacking:
            self._syncer.gate.request_missing()  # starts or clears the code_wait clocks
        for topology_id, base in sorted(storms.items()):
            held = present.get(base.digest, False)
            if held and base.status != records.CODE_MISSING:
                continue
            if base.status != records.CODE_MISSING and not held:
                if self._syncer.gate.code_abandoned(topology_id):
                    if not self._set_status(topology_id, missing=True):
                        continue
                    self._record_error(
                        topology_id,
                        f"no live replica has held the code of {topology_id} "
                        f"(digest {base.digest[:12]}); marked CODE_MISSING",
                    )
                    changes.append(f"{topology_id}: CODE_MISSING")
            elif (
                base.status == records.CODE_MISSING
                and held
                and self._set_status(topology_id, missing=False)
            ):
                changes.append(f"{topology_id}: code back, status restored")
        return changes

    def _set_status(self, topology_id: str, missing: bool) -> bool:
        """Mark CODE_MISSING (remembering the status it had), or restore that status.

        Decided on the record as it is now, not as the cache saw it: a kill that landed
        meanwhile must not be undone. False (nothing written) when the record said
        otherwise.
        """

        def mutate(base: records.StormBase) -> None:
            if missing:
                if base.status in (records.KILLED, records.CODE_MISSING):
                    raise _Unchanged
                base.status_before_code_missing = base.status
                base.status = records.CODE_MISSING
            else:
                if base.status != records.CODE_MISSING:
                    raise _Unchanged
                base.status = base.status_before_code_missing or records.ACTIVE
                base.status_before_code_missing = records.STATUS_UNSPECIFIED

        try:
            self._writer.update_record(
                self._paths.storm(topology_id), records.StormBase.FromString, mutate
            )
        except _Unchanged:
            return False
        return True

    def _record_error(self, topology_id: str, message: str) -> None:
        error = records.ErrorInfo(
            component=COMPONENT, message=message, time_ms=int(time.time() * 1000), host=self._id
        )
        append_error(self._client, self._paths, self._writer, topology_id, error)

    def _run(self) -> None:
        run_duty(
            "code duty",
            self._writer.token,
            self.run_once,
            interval=self._interval,
            log=log,
            first_pass_at_once=False,
            change_level=logging.WARNING,
        )
