"""Wires the UI into a replica: its mirror of ZooKeeper, graph loader, view and server."""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from cluster.recordcache import RecordCache
from code_sync.store import CodeStore
from leader.discovery import LeaderCache
from nimbus.server.ui.graph import GraphCache
from nimbus.server.ui.mirror import ZkMirror
from nimbus.server.ui.server import UiServer
from nimbus.server.ui.snapshot import ClusterView, Sources, mirrored_folders


class WebUi:
    """``bind()`` early (a taken port fails first), ``start()`` once the folders exist."""

    def __init__(
        self,
        client: KazooClient,
        *,
        paths: Paths,
        replica_id: str,
        host: str,
        port: int,
        leader_cache: LeaderCache,
        storms: RecordCache[records.StormBase],
        store: CodeStore,
        connected: Callable[[], bool],
    ) -> None:
        self._mirror = ZkMirror(client, mirrored_folders(paths))
        self._graphs = GraphCache(store, on_ready=self.poke)
        view = ClusterView(
            Sources(
                served_by=replica_id,
                paths=paths,
                connected=connected,
                leader=leader_cache.leader,
                nimbuses=leader_cache.nimbuses,
                storms=storms.items,
                mirror=self._mirror,
                graphs=self._graphs,
            )
        )
        self._server = UiServer(host, port, view)
        self._mirror.add_listener(self.poke)
        leader_cache.add_listener(self.poke)
        storms.add_listener(self.poke)
        client.add_listener(lambda state: self.poke())

    @property
    def port(self) -> int:
        return self._server.bound_port

    def bind(self) -> None:
        """Serve (from still empty caches); raises ``OSError`` when the port is taken."""
        self._server.start()

    def start(self) -> None:
        """Mirror ZooKeeper: needs a connected client and the cluster's folders."""
        self._mirror.start()

    def poke(self) -> None:
        """A cache changed (or ZooKeeper's state did): push fresh snapshots."""
        self._server.poke()

    def stop(self) -> None:
        self._server.stop()
        self._graphs.stop()
        self._mirror.stop()
