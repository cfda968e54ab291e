"""Component graphs of topologies whose record carries none, read from their packages.

A topology checked at submit has its graph in ``StormBase.components_json`` and never
comes here. For one submitted unchecked, the graph is whatever the package's ``build()``
returns, so it is made once per code digest (packages are immutable, addressed by
digest) by ``nimbus.ui.graphdump`` in a child process with a deadline, in the
background: a page asking for it sees ``loading`` first and the graph on a later update.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from code_sync.errors import StoreError
from code_sync.store import CodeStore

log = logging.getLogger(__name__)

LOAD_TIMEOUT = 120.0
_REASON_CHARS = 300


class GraphCache:
    def __init__(
        self,
        store: CodeStore,
        on_ready: Callable[[], None],
        *,
        timeout: float = LOAD_TIMEOUT,
    ) -> None:
        self._store = store
        self._on_ready = on_ready
        self._timeout = timeout
        self._guard = threading.Lock()
        self._graphs: dict[str, dict[str, Any]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ui-graph")
        self._child: subprocess.Popen[str] | None = None
        self._stopped = False

    def get(self, digest: str) -> dict[str, Any]:
        """``{"status": "ready", "components": [...]}``, or ``loading`` / ``unavailable``."""
        with self._guard:
            known = self._graphs.get(digest)
            if known is not None:
                return known
            self._graphs[digest] = loading = {"status": "loading", "components": []}
        self._pool.submit(self._load, digest)
        return loading

    def stop(self) -> None:
        """Kill a loader still running: a replica's stop must not wait for user code."""
        self._stopped = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._guard:
            child = self._child
        if child is not None:
            child.kill()

    def _load(self, digest: str) -> None:
        graph = self._run(digest)
        with self._guard:
            if graph.get("retry"):
                self._graphs.pop(digest, None)  # ask again once the code has arrived
            else:
                self._graphs[digest] = graph
        self._on_ready()

    def _run(self, digest: str) -> dict[str, Any]:
        try:
            if not self._store.has(digest):
                return _unavailable("this replica does not hold the code yet", retry=True)
        except StoreError as e:
            return _unavailable(f"cannot read the package: {e}", retry=True)
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "nimbus.ui.graphdump", str(self._store.path(digest))],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as e:
            return _unavailable(f"could not start the graph loader: {e}", retry=True)
        with self._guard:
            self._child = child
        try:
            out, err = child.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return _unavailable(f"building the topology took over {self._timeout:.0f} s")
        finally:
            with self._guard:
                self._child = None
        if self._stopped:
            return _unavailable("the web UI stopped", retry=True)
        if child.returncode != 0:
            lines = err.strip().splitlines()
            reason = lines[-1] if lines else f"exit code {child.returncode}"
            return _unavailable(reason[:_REASON_CHARS])
        try:
            components = json.loads(out)["components"]
        except (ValueError, KeyError, TypeError):
            return _unavailable("the graph loader printed no graph")
        return {"status": "ready", "components": components}


def _unavailable(reason: str, *, retry: bool = False) -> dict[str, Any]:
    log.info("no component graph: %s", reason)
    graph: dict[str, Any] = {"status": "unavailable", "reason": reason, "components": []}
    if retry:
        graph["retry"] = True
    return graph
