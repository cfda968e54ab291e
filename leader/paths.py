"""ZooKeeper paths of the layout in DESIGN.md, in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paths:
    root: str

    @property
    def leader_lock(self) -> str:
        return f"{self.root}/leader-lock"

    @property
    def leader_epoch(self) -> str:
        return f"{self.root}/leader-epoch"

    @property
    def epochs(self) -> str:
        return f"{self.root}/epochs"

    @property
    def nimbuses(self) -> str:
        return f"{self.root}/nimbuses"

    @property
    def storms(self) -> str:
        return f"{self.root}/storms"

    @property
    def code_distributor(self) -> str:
        return f"{self.root}/code-distributor"

    @property
    def names(self) -> str:
        return f"{self.root}/names"

    @property
    def errors(self) -> str:
        return f"{self.root}/errors"

    def storm(self, topology_id: str) -> str:
        return f"{self.storms}/{topology_id}"

    def name(self, name: str) -> str:
        return f"{self.names}/{name}"

    def code_holders(self, topology_id: str) -> str:
        return f"{self.code_distributor}/{topology_id}"

    def code_holder(self, topology_id: str, replica_id: str) -> str:
        return f"{self.code_distributor}/{topology_id}/{replica_id}"

    def nimbus(self, replica_id: str) -> str:
        return f"{self.nimbuses}/{replica_id}"

    def folders(self) -> list[str]:
        """Structural folders every replica makes sure exist at start."""
        return [
            self.leader_lock,
            self.epochs,
            self.nimbuses,
            self.storms,
            self.code_distributor,
            self.names,
            self.errors,
        ]
