"""Write operations as plain values, so one code path turns any batch into a multi-op."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False
    acl: tuple[Any, ...] | None = None  # kazoo ACLs; None: the client's default ACL


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    version: int = -1  # -1: any version; otherwise a compare-and-set


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True)
class Check:
    path: str
    version: int = -1


Op = Create | SetData | Delete | Check
