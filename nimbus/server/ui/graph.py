"""Component graphs of topologies whose record carries none, read from their packages.

A topology checked at submit has its graph in ``StormBase.components_json`` and never
comes here. For one recorded without it, the graph is whatever the package's ``build()``
returns: user code, so it is run by the same sandboxed check the leader uses at submit
(``nimbus.duties.package_check``: a child process with time, memory and file limits), once per
code digest (packages are immutable), in the background. A page asking for a graph sees
``loading`` first and the graph on a later update.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from code_sync.errors import StoreError
from code_sync.store import CodeStore
from nimbus.duties.package_check import (
    CheckLimits,
    PackageCheckFailed,
    PackageInvalid,
    check_package,
)

log = logging.getLogger(__name__)

#: Generous: the check imports PySpark, and the UI is never in a hurry.
LIMITS = CheckLimits(timeout_s=60.0)


class GraphCache:
    def __init__(
        self,
        store: CodeStore,
        on_ready: Callable[[], None],
        *,
        limits: CheckLimits = LIMITS,
    ) -> None:
        self._store = store
        self._on_ready = on_ready
        self._limits = limits
        self._guard = threading.Lock()
        self._one_at_a_time = threading.Lock()
        self._graphs: dict[str, dict[str, Any]] = {}
        self._stopped = False

    def get(self, digest: str) -> dict[str, Any]:
        """``{"status": "ready", "components": [...]}``, or ``loading`` / ``unavailable``."""
        with self._guard:
            known = self._graphs.get(digest)
            if known is not None:
                return known
            self._graphs[digest] = loading = {"status": "loading", "components": []}
        # A daemon thread: a replica's stop never waits for a package's build().
        threading.Thread(target=self._load, args=(digest,), name="ui-graph", daemon=True).start()
        return loading

    def stop(self) -> None:
        self._stopped = True

    def _load(self, digest: str) -> None:
        with self._one_at_a_time:
            graph = self._run(digest)
        with self._guard:
            if graph.get("retry"):
                self._graphs.pop(digest, None)  # ask again once the code has arrived
            else:
                self._graphs[digest] = graph
        if not self._stopped:
            self._on_ready()

    def _run(self, digest: str) -> dict[str, Any]:
        if self._stopped:
            return _unavailable("the web UI stopped", retry=True)
        try:
            if not self._store.has(digest):
                return _unavailable("this replica does not hold the code yet", retry=True)
            # The graph only: no Spark analysis of a package the leader already accepted.
            components = check_package(self._store.path(digest), self._limits, analyse=False)
        except StoreError as e:
            return _unavailable(f"cannot read the package: {e}", retry=True)
        except PackageInvalid as e:
            where = f" (component {e.component!r})" if e.component else ""
            return _unavailable(f"the topology is invalid{where}: {e}")
        except PackageCheckFailed as e:
            return _unavailable(str(e))
        except OSError as e:
            return _unavailable(f"could not run the package check: {e}", retry=True)
        return {"status": "ready", "components": components}


def _unavailable(reason: str, *, retry: bool = False) -> dict[str, Any]:
    log.info("no component graph: %s", reason)
    graph: dict[str, Any] = {"status": "unavailable", "reason": reason, "components": []}
    if retry:
        graph["retry"] = True
    return graph
