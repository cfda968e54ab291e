"""Fixtures and helpers for tests that run Nimbus replicas as processes."""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cluster.api import pb
from code_sync.package import make_package
from nimbus.client import NimbusClient
from pipeline.samples import MINIMAL_TOPOLOGY
from tests.cluster import Replica, wait_for_agreed_leader
from tests.stash import REPLICAS_KEY
from tests.tiers import needs

ROOT = "/storm"
Spawn = Callable[..., Replica]


def sync_flags(**overrides: object) -> tuple[str, ...]:
    """``nimbus serve`` flags for code distribution, fast enough for tests."""
    flags: dict[str, object] = {
        "replicas": 3,
        "min-replicas": 2,
        "replication-wait": 20,
        "code-wait": 60,
        "sync-interval": 0.3,
        "max-package-mib": 1,
    }
    flags.update({k.replace("_", "-"): v for k, v in overrides.items()})
    return tuple(x for k, v in flags.items() for x in (f"--{k}", str(v)))


@pytest.fixture
@needs("replicas")
def spawn(zk_hosts: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Spawn]:
    """Start a replica process (killed at the end of the test)."""
    started: list[Replica] = []
    request.node.stash[REPLICAS_KEY] = started

    def make(
        *, extra: tuple[str, ...] | None = None, zookeeper: str | None = None, **kwargs: object
    ) -> Replica:
        replica = Replica(
            zookeeper or zk_hosts,
            ROOT,
            tmp_path,
            extra=sync_flags() if extra is None else extra,
            **kwargs,  # type: ignore[arg-type]
        )
        started.append(replica.start())
        return replica

    yield make
    for replica in started:
        replica.stop(signal.SIGKILL)


def lone_leader(spawn: Spawn) -> Replica:
    """One replica that needs no other to hold a package (``--min-replicas 1``), once it
    leads."""
    replica = spawn(extra=sync_flags(min_replicas=1))
    wait_for_agreed_leader([replica], timeout=30)
    return replica


@pytest.fixture
def lone_client(spawn: Spawn, tmp_path: Path) -> Iterator[tuple[NimbusClient, Path]]:
    """A client of a ``lone_leader``, and a valid package (tag ``wc``) to submit through it."""
    replica = lone_leader(spawn)
    path, _ = package(tmp_path, "wc")
    with NimbusClient([replica.address]) as client:
        yield client, path


def package(tmp_path: Path, tag: str, size: int = 2000) -> tuple[Path, str]:
    """A valid package with random content; returns its path and SHA-256."""
    body = f"# {tag}\n".encode() + os.urandom(size)
    path = make_package(
        {"topology.py": MINIMAL_TOPOLOGY, "data.bin": body},
        tmp_path / f"{tag}.zip",
    )
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def submit(
    client: NimbusClient,
    path: Path,
    name: str,
    digest: str | None = None,
    *,
    num_workers: int = 0,
    request_id: str = "",
) -> pb.SubmitTopologyResponse:
    """Submit the package at ``path`` (expecting ``digest``, by default its own), in 64 KiB
    chunks; ``num_workers`` 0 and ``request_id`` "" leave those to their defaults."""
    data = path.read_bytes()
    header = pb.SubmitHeader(
        name=name,
        expected_digest=digest or hashlib.sha256(data).hexdigest(),
        package_size=len(data),
        num_workers=num_workers,
        client_request_id=request_id,
    )
    chunk = 65536
    return client.submit(
        header, lambda: iter([data[i : i + chunk] for i in range(0, len(data), chunk)])
    )


def holds(replica: Replica, digest: str) -> bool:
    """The replica's store has a verified copy."""
    stored = replica.code_dir / digest
    return stored.is_file() and hashlib.sha256(stored.read_bytes()).hexdigest() == digest
