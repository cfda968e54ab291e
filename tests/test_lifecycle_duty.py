"""The leader's lifecycle pass: one topology whose step fails holds up no other one."""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.api import records
from fencing import FencedWriter
from nimbus.duties.lifecycle import LifecycleDuty
from tests.test_scheduler import DIGEST, PATHS
from tests.test_scheduler_duty import lead

NOW_MS = 10**13  # every kill below is long due


def _killed(client: KazooClient, writer: FencedWriter, tid: str, name_data: bytes) -> None:
    base = records.StormBase(
        name=tid, status=records.KILLED, num_workers=1, digest=DIGEST, kill_time_ms=1
    )
    writer.create_record(PATHS.storm(tid), base)
    client.ensure_path(PATHS.names)
    client.create(PATHS.name(tid), name_data)


def test_a_failing_step_does_not_stop_the_pass(zk_client: KazooClient) -> None:
    lock, writer = lead(zk_client, "replica-1")
    try:
        _killed(zk_client, writer, "a-1-1", b"\xff\xfe not utf-8")  # a damaged name node
        _killed(zk_client, writer, "b-1-1", b"b-1-1")
        zk_client.create(f"{PATHS.name('b-1-1')}/stray", b"")  # its removal cannot succeed
        _killed(zk_client, writer, "c-1-1", b"c-1-1")
        duty = LifecycleDuty(zk_client, PATHS, writer, interval=1.0, wall_ms=lambda: NOW_MS)
        changes = duty.run_once()
        assert "a-1-1: removed" in changes and "c-1-1: removed" in changes, changes
        assert zk_client.exists(PATHS.storm("a-1-1")) is None
        assert zk_client.exists(PATHS.name("a-1-1")) is None, "the damaged name node went too"
        assert zk_client.exists(PATHS.storm("c-1-1")) is None, "removed after b-1-1 failed"
        assert zk_client.exists(PATHS.storm("b-1-1")) is not None, "b-1-1 waits, logged"
    finally:
        lock.release()
