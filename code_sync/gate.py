"""The code gate the elector asks before queueing and after winning.

True only when every topology in ``<root>/storms`` has its package in the local store,
read from ZooKeeper at the moment of asking (never from a watch cache). The code
distribution issue replaces the presence check with a verified content-addressed store
and the CODE_MISSING escape hatch; the contract stays: a callable returning bool.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from nimbus.api import records


class LocalCodeGate:
    def __init__(self, client: KazooClient, root: str, code_dir: Path) -> None:
        self._client = client
        self._storms = f"{root}/storms"
        self._code_dir = code_dir

    def missing(self) -> list[str]:
        """Topology ids whose package this replica lacks (a fresh ZooKeeper read)."""
        try:
            ids = self._client.get_children(self._storms)
        except NoNodeError:
            return []
        absent: list[str] = []
        for topology_id in sorted(ids):
            try:
                data, _ = self._client.get(f"{self._storms}/{topology_id}")
                digest = records.StormBase.FromString(data).digest
            except NoNodeError:
                continue  # killed meanwhile
            except DecodeError:
                digest = ""
            if not digest or not (self._code_dir / digest).is_file():
                absent.append(topology_id)
        return absent

    def __call__(self) -> bool:
        return not self.missing()
