"""A submit's wait for replicas follows ZooKeeper's latency: a slow disk slows it down."""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from code_sync.store import CodeStore
from nimbus.config import make_config
from nimbus.duties.submission import WAIT_PER_LATENCY, Submitter


def test_the_replication_wait_grows_with_the_beats_latency_within_the_grace(
    zk_client: KazooClient, tmp_path: Path
) -> None:
    config = make_config(
        zookeeper="z:1", listen="127.0.0.1:1", code_dir=tmp_path, replication_wait=10
    )
    latency = [0.005]

    def submitter() -> Submitter:
        store = CodeStore(tmp_path / "store", max_package_bytes=1 << 20)
        return Submitter(
            zk_client, config, store, current_writer=lambda: None, zk_latency=lambda: latency[0]
        )

    waits = submitter()
    assert waits.replication_wait() == 10.0  # fast: the flag's wait
    latency[0] = 1.8  # 0.9 s fsyncs: two per write
    assert waits.replication_wait() == WAIT_PER_LATENCY * 1.8
    latency[0] = 60.0
    assert waits.replication_wait() == config.gc_grace / 2  # never past the grace
