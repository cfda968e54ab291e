"""A watch-fed, read-only copy of a few ZooKeeper subtrees, for the UI's view.

Kazoo's ``TreeCache`` does the watching (and re-reads everything after a reconnect);
this class flattens its events into a dict that other threads can copy under a lock,
because the recipe's own nodes are only safe to touch from its background thread.
The folders must already exist: the daemon creates them before the UI starts, so the
recipe's ``ensure_path`` only checks and never writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from kazoo.client import KazooClient
from kazoo.recipe.cache import TreeCache, TreeEvent

log = logging.getLogger(__name__)


class ZkMirror:
    def __init__(self, client: KazooClient, folders: Sequence[str]) -> None:
        self._folders = tuple(f.rstrip("/") for f in folders)
        self._trees = [TreeCache(client, folder) for folder in self._folders]
        self._guard = threading.Lock()
        self._nodes: dict[str, dict[str, bytes]] = {f: {} for f in self._folders}
        self._listeners: list[Callable[[], None]] = []

    def start(self) -> None:
        for tree in self._trees:
            tree.listen(self._on_event)
            tree.listen_fault(lambda e: log.warning("UI cache: %r", e))
            tree.start()

    def stop(self) -> None:
        for tree in self._trees:
            tree.close()

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Called after any change, from a recipe thread; must not block."""
        self._listeners.append(callback)

    def subtree(self, folder: str, depth: int = 1) -> dict[str, bytes]:
        """Nodes ``depth`` levels below ``folder``, keyed by their path relative to it."""
        with self._guard:
            found = dict(self._nodes.get(folder.rstrip("/"), {}))
        return {rel: data for rel, data in found.items() if rel.count("/") == depth - 1}

    def _place(self, path: str) -> tuple[dict[str, bytes], str] | None:
        for folder in self._folders:
            if path.startswith(folder + "/"):
                return self._nodes[folder], path[len(folder) + 1 :]
        return None  # a folder itself

    def _on_event(self, event: TreeEvent) -> None:
        kind = event.event_type
        if kind in (TreeEvent.NODE_ADDED, TreeEvent.NODE_UPDATED, TreeEvent.NODE_REMOVED):
            node = event.event_data
            with self._guard:
                place = self._place(node.path)
                if place is not None:
                    nodes, rel = place
                    if kind == TreeEvent.NODE_REMOVED:
                        nodes.pop(rel, None)
                    else:
                        nodes[rel] = node.data or b""
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("UI cache listener failed")
