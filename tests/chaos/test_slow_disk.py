"""The fault mechanics of issue 41's rows, without a Nimbus cluster.

- The slow disk (``tests.chaos.slow_disk``) on a real ZooKeeper that syncs its log: under
  strace's injection a write takes at least the delay, ZooKeeper itself logs the slow
  sync, and once strace ends the JVM is traced no more and writes are fast again. Needs
  root (ptrace of a sibling) and strace, like the kernel fault tests need root.
- The accept-and-close server behind ``accept-close-proxy``: a connect succeeds, then the
  connection is closed before a byte.
- The figures a stall is read with, from planted poll rounds.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from devtools.zkserver import ZooKeeperCluster
from tests.chaos import slow_disk
from tests.chaos.kernel_ensemble import Poll
from tests.cluster import REPO, free_port

DELAY = 0.6


@pytest.fixture
def synced_zookeeper(
    tmp_path: Path, fsync_stall: type[slow_disk.FsyncStall]
) -> Iterator[tuple[ZooKeeperCluster, KazooClient]]:
    """A server that fsyncs, for the stall tests alone."""
    zk = ZooKeeperCluster(
        size=1,
        base_dir=tmp_path / "zk",
        force_sync=True,
        extra_config=(slow_disk.FSYNC_WARNING_CONFIG,),
    ).start()
    try:
        client = slow_disk.probe_client(zk.connect_string)
        yield zk, client
        slow_disk.close_client(client)
    finally:
        zk.stop()


def _tracer(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no TracerPid in /proc/{pid}/status")


@pytest.mark.timeout(120)
def test_the_fsync_stall_slows_every_write_and_is_gone_after(
    synced_zookeeper: tuple[ZooKeeperCluster, KazooClient],
    fsync_stall: type[slow_disk.FsyncStall],
    tmp_path: Path,
) -> None:
    zk, client = synced_zookeeper
    (pid,) = zk.pids()
    assert slow_disk.timed_write(client) < DELAY, "a write is slow before any stall"
    logs = slow_disk.LogMark([zk.log_path(0)])
    stall = fsync_stall([pid], DELAY, tmp_path / "strace")
    try:
        stall.start()
        assert _tracer(pid) != 0
        took = [slow_disk.timed_write(client) for _ in range(3)]
        print(f"writes under a {DELAY} s stall: {took}")
        assert min(took) >= DELAY, took
        slow_disk.check_stalled(min(took), DELAY, "test")  # does not raise
    finally:
        stall.stop()
    assert not stall.running
    assert stall.delayed() >= 3
    assert _tracer(pid) == 0, "the JVM is still traced after strace ended"
    warned = logs.fsync_warnings()
    assert warned and max(warned) >= DELAY * 1000 * 0.9, warned  # ZooKeeper's own word
    after = [slow_disk.timed_write(client) for _ in range(3)]
    assert max(after) < DELAY, after
    with pytest.raises(slow_disk.FsyncStallError, match="did not work"):
        slow_disk.check_stalled(max(after), DELAY, "after")


@pytest.mark.timeout(60)
def test_a_stall_on_a_zookeeper_without_fsync_is_caught(
    fsync_stall: type[slow_disk.FsyncStall], tmp_path: Path
) -> None:
    """``forceSync=no``: nothing to delay, and the check says so rather than measuring."""
    with ZooKeeperCluster(size=1, base_dir=tmp_path / "zk") as zk:
        client = slow_disk.probe_client(zk.connect_string)
        try:
            with fsync_stall(zk.pids(), DELAY, tmp_path / "strace"):
                took = slow_disk.timed_write(client)
            with pytest.raises(slow_disk.FsyncStallError):
                slow_disk.check_stalled(took, DELAY, "no fsync")
        finally:
            slow_disk.close_client(client)


def test_the_accept_and_close_server_closes_every_connection() -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "devtools.acceptclose", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("listening")
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.settimeout(5)
                # Closed by the other end before a byte (a reset is a close as well).
                with contextlib.suppress(ConnectionResetError):
                    assert conn.recv(1) == b""
    finally:
        server.terminate()
        assert server.wait(10) == 0


def test_row_names() -> None:
    assert slow_disk.parse("zk-slow-disk@0.45") == slow_disk.SlowDisk("zk-slow-disk@0.45", 0.45)
    assert slow_disk.parse("zk-slow-disk@2+sigkill") == slow_disk.SlowDisk(
        "zk-slow-disk@2+sigkill", 2.0, "sigkill"
    )
    assert slow_disk.parse("zk-slow-disk@0") is None
    assert slow_disk.parse("zk-slow-disk") is None
    assert slow_disk.parse("sigkill") is None


def _rounds(claims: list[dict[int, int]], start: float = 100.0) -> list[Poll]:
    return [Poll(start + 0.05 * i, c, "") for i, c in enumerate(claims)]


def test_stall_figures_place_the_stretches_against_the_stall() -> None:
    lead: dict[int, int] = {0: 1}
    none: dict[int, int] = {}
    # 1 s of claims, the stall at 101.0: 0.5 s with none at once, claims, 0.25 s with none
    # 2 s later, then a new term.
    claims = [lead] * 20 + [none] * 10 + [lead] * 40 + [none] * 5 + [{1: 2}] * 20
    rounds = _rounds(claims)
    figures = slow_disk.stall_figures(rounds, 101.0, 104.0, 104.75, delay=0.45)
    assert figures["longest_no_claim_s"] == pytest.approx(0.55)
    assert figures["longest_from_s"] == pytest.approx(-0.05)
    assert figures["longest_is_at_start"] is True
    assert figures["longest_at_start_s"] == pytest.approx(0.55)
    assert figures["longest_after_start_s"] == pytest.approx(0.3)
    assert figures["no_claim_stretches"] == 2
    assert figures["epochs_claimed"] == [1, 2]
    assert figures["rounds_during"] == 61
    assert figures["no_claim_fraction_during"] == pytest.approx(15 / 61, abs=1e-3)
    assert slow_disk.first_claim_after(rounds, 103.5, above_epoch=1) == pytest.approx(0.25)
    assert slow_disk.first_claim_after(rounds, 101.0, replica=0) == pytest.approx(0.5)
