"""Code distribution end to end: replicas as processes on a real ZooKeeper."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from code_sync.held import INDEX_NAME
from code_sync.package import make_package
from nimbus.client import NimbusCallError, NimbusClient
from pipeline.samples import MINIMAL_TOPOLOGY
from tests.cluster import REPO, wait_for_agreed_leader
from tests.processes import nimbus_cli
from tests.replica_fixtures import Spawn, holds, lone_leader, package, submit, sync_flags
from tests.root_fixtures import Mount
from tests.waiting import wait_until

PATHS = Paths("/storm")


def test_an_acknowledged_submit_is_held_by_min_replicas_then_by_all(
    spawn: Spawn, tmp_path: Path
) -> None:
    replicas = [spawn() for _ in range(3)]
    wait_for_agreed_leader(replicas, timeout=30)
    path, digest = package(tmp_path, "wc")
    with NimbusClient([r.address for r in replicas]) as client:
        reply = submit(client, path, "wc")
        # The moment the call returns, at least two replicas hold a verified copy.
        holding = [r for r in replicas if holds(r, digest)]
        assert len(holding) >= 2
        assert len(reply.code_replicas) >= 2
        assert reply.digest == digest and reply.topology_id.startswith("wc-")
        wait_until(lambda: all(holds(r, digest) for r in replicas), timeout=10)
        detail = client.describe("wc").summary
        assert (detail.id, detail.name, detail.digest) == (reply.topology_id, "wc", digest)
        assert detail.status == records.ACTIVE
        assert detail.epoch == reply.epoch
        wait_until(lambda: len(client.describe("wc").summary.code_replicas) == 3, timeout=10)
        with pytest.raises(NimbusCallError) as again:
            submit(client, path, "wc")
        assert again.value.code == grpc.StatusCode.ALREADY_EXISTS


def test_killing_the_leader_right_after_each_ack_never_loses_a_topology(
    spawn: Spawn, tmp_path: Path, zk_client: KazooClient
) -> None:
    replicas = [spawn() for _ in range(3)]
    acknowledged: dict[str, str] = {}
    for round_ in range(10):
        leader = wait_for_agreed_leader(replicas, timeout=30)
        path, digest = package(tmp_path, f"t{round_}")
        with NimbusClient([r.address for r in replicas], deadline=60, attempts=100) as client:
            submit(client, path, f"t{round_}")
        acknowledged[f"t{round_}"] = digest
        victim = next(r for r in replicas if r.address == leader.replica_id)
        victim.stop(signal.SIGKILL)
        replicas.remove(victim)
        new = wait_for_agreed_leader(replicas, timeout=30, newer_than=leader.epoch)
        new_leader = next(r for r in replicas if r.address == new.replica_id)
        storms = {
            records.StormBase.FromString(zk_client.get(PATHS.storm(t))[0]).name: t
            for t in zk_client.get_children(PATHS.storms)
        }
        assert set(acknowledged) <= set(storms), f"lost after round {round_}"
        assert all(holds(new_leader, d) for d in acknowledged.values())
        with NimbusClient([new_leader.address]) as client:
            for name in acknowledged:
                assert client.describe(name).summary.status == records.ACTIVE
        replicas.append(spawn(code_dir=victim.code_dir))  # the pod comes back


def test_a_follower_with_a_damaged_package_does_not_lead_until_refetched(
    spawn: Spawn, tmp_path: Path
) -> None:
    a, b, c = (spawn() for _ in range(3))
    first = wait_for_agreed_leader([a, b, c], timeout=30)
    path, digest = package(tmp_path, "wc", size=200_000)
    with NimbusClient([a.address]) as client:
        submit(client, path, "wc")
    wait_until(lambda: all(holds(r, digest) for r in (a, b, c)), timeout=10)
    by_address = {r.address: r for r in (a, b, c)}
    leader = by_address[first.replica_id]
    damaged, keeper = [r for r in (a, b, c) if r is not leader]
    keeper.stop(signal.SIGTERM)
    stored = damaged.code_dir / digest
    raw = bytearray(stored.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    stored.write_bytes(bytes(raw))  # one flipped byte
    # Killed, not stopped: a stopping leader serves on until the next replica has taken
    # office (1 s at most), and the damaged one would rightly fetch a good copy from it.
    leader.stop(signal.SIGKILL)
    # Alone with a damaged copy and nobody to fetch from: it must not take office.
    wait_until(lambda: "waiting for code" in damaged.log_tail(200), timeout=20)
    assert damaged.leader_reply() is None
    assert damaged.health("nimbus.leader") == "NOT_SERVING"
    revived = spawn(code_dir=keeper.code_dir)  # a replica with a good copy returns
    second = wait_for_agreed_leader([damaged, revived], timeout=30, newer_than=first.epoch)
    assert second.epoch > first.epoch
    wait_until(lambda: holds(damaged, digest), timeout=20)


def test_a_replica_started_empty_catches_up_before_it_queues(spawn: Spawn, tmp_path: Path) -> None:
    flags = sync_flags(min_replicas=1)
    first = spawn(extra=flags)
    wait_for_agreed_leader([first], timeout=30)
    digests = []
    with NimbusClient([first.address]) as client:
        for name in ("a", "b"):
            path, digest = package(tmp_path, name)
            submit(client, path, name)
            digests.append(digest)
    late = spawn(extra=flags)
    wait_until(lambda: "queued for leadership" in late.log_tail(300), timeout=30)
    assert all(holds(late, d) for d in digests)
    log = late.log_tail(300)
    assert log.index("queued for leadership") > max(log.index(f"({d[:12]})") for d in digests)


def test_bad_uploads_are_refused_with_the_problem_named_and_nothing_kept(
    spawn: Spawn, tmp_path: Path, zk_client: KazooClient
) -> None:
    leader_replica = lone_leader(spawn)
    good, good_digest = package(tmp_path, "good")
    big, _ = package(tmp_path, "big", size=2 * 1024 * 1024)
    not_zip = tmp_path / "not.zip"
    not_zip.write_bytes(b"this is not a zip archive" * 10)
    slip = make_package({"topology.py": b"", "../escape.py": b"x"}, tmp_path / "slip.zip")
    cases = [
        (big, None, "limit"),
        (not_zip, None, "not a zip"),
        (slip, None, "escapes"),
        (good, "0" * 64, "digest mismatch"),
    ]
    with NimbusClient([leader_replica.address], attempts=1) as client:
        for path, digest, words in cases:
            with pytest.raises(NimbusCallError) as refused:
                submit(client, path, "bad", digest)
            assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert words in str(refused.value)
        with pytest.raises(NimbusCallError) as bad_name:
            submit(client, good, "../etc")
        assert bad_name.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert zk_client.get_children(PATHS.code_distributor) == []
    assert zk_client.get_children(PATHS.storms) == []
    stored = [p.name for p in leader_replica.code_dir.iterdir() if not p.name.startswith(".")]
    assert stored == []
    assert good_digest not in stored


def test_a_full_disk_during_download_leaves_nothing_partial_and_recovers(
    spawn: Spawn, tmpfs: Mount, tmp_path: Path
) -> None:
    small = tmp_path / "small"
    small.mkdir()
    tmpfs(small, "200k")
    flags = sync_flags(min_replicas=1, replicas=2)
    source = spawn(extra=flags)
    wait_for_agreed_leader([source], timeout=30)
    path, digest = package(tmp_path, "big", size=400_000)
    with NimbusClient([source.address]) as client:
        submit(client, path, "big")
    cramped = spawn(extra=flags, code_dir=small)
    wait_until(lambda: "local store" in cramped.log_tail(200), timeout=30)
    assert cramped.proc is not None and cramped.proc.poll() is None, "it must not crash"

    def files() -> set[Path]:  # the held index is the store's own record, not a leftover
        return {p for p in small.rglob("*") if p.is_file() and p.name != INDEX_NAME}

    # The replica keeps retrying, so a temp file of the attempt in flight may be
    # there now; a leftover is one that stays after its attempt failed. Temp names
    # are unique per attempt.
    seen = files()
    wait_until(lambda: not (seen & files()), timeout=30, message=f"leftovers {seen}")
    assert all(p.name.endswith(".part") for p in seen), seen  # never a whole package
    subprocess.run(["mount", "-o", "remount,size=4m", str(small)], check=True)
    wait_until(lambda: holds(cramped, digest), timeout=30)


def test_when_every_replica_lost_the_code_a_leader_is_still_elected_and_marks_it(
    spawn: Spawn, tmp_path: Path, zk_client: KazooClient
) -> None:
    flags = sync_flags(code_wait=2, replicas=2)
    a, b = spawn(extra=flags), spawn(extra=flags)
    wait_for_agreed_leader([a, b], timeout=30)
    path, digest = package(tmp_path, "lost")
    with NimbusClient([a.address, b.address]) as client:
        reply = submit(client, path, "lost")
    wait_until(lambda: holds(a, digest) and holds(b, digest), timeout=10)
    a.stop(signal.SIGKILL)
    b.stop(signal.SIGKILL)
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / digest).write_bytes((a.code_dir / digest).read_bytes())
    for r in (a, b):
        (r.code_dir / digest).unlink()
    a2, b2 = spawn(extra=flags, code_dir=a.code_dir), spawn(extra=flags, code_dir=b.code_dir)
    wait_for_agreed_leader([a2, b2], timeout=60)
    with NimbusClient([a2.address, b2.address]) as client:
        wait_until(
            lambda: client.describe("lost").summary.status == records.CODE_MISSING, timeout=30
        )
        errors = zk_client.get_children(f"{PATHS.errors}/{reply.topology_id}/nimbus")
        assert errors, "an error is recorded"
        message = records.ErrorInfo.FromString(
            zk_client.get(f"{PATHS.errors}/{reply.topology_id}/nimbus/{errors[0]}")[0]
        ).message
        assert "CODE_MISSING" in message
        shown = client.describe("lost").errors  # what `nimbus describe` shows
        assert any("CODE_MISSING" in e.message for e in shown)
        spawn(extra=flags, code_dir=keep)  # a replica with the code comes back
        wait_until(lambda: client.describe("lost").summary.status == records.ACTIVE, timeout=30)


def test_the_cli_submits_with_progress_lines_and_describes_as_json(
    spawn: Spawn, tmp_path: Path
) -> None:
    import json

    replica = lone_leader(spawn)
    path, digest = package(tmp_path, "cli", size=300_000)

    done = nimbus_cli("submit", str(path), "--name", "cli", "--seeds", replica.address)
    assert done.returncode == 0, done.stderr
    assert "uploaded" in done.stderr and "(100%)" in done.stderr  # plain lines, not a tty
    assert "submitted cli-" in done.stdout
    shown = nimbus_cli("describe", "cli", "--seeds", replica.address, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["name"] == "cli" and view["status"] == "ACTIVE" and view["digest"] == digest
    assert view["id"].startswith("cli-") and view["epoch"] >= 1
    assert view["code_replicas"] == [replica.address]
    missing = nimbus_cli("describe", "nope", "--seeds", replica.address, "--json")
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr
    bad = nimbus_cli(
        "submit", str(tmp_path / "absent.zip"), "--name", "x", "--seeds", replica.address
    )
    assert bad.returncode == 2 and "cannot read" in bad.stderr
    folder = tmp_path / "as-folder"
    folder.mkdir()
    (folder / "topology.py").write_bytes(MINIMAL_TOPOLOGY)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "topology.cpython-311.pyc").write_bytes(b"\0")
    done = nimbus_cli("submit", str(folder), "--name", "folder", "--seeds", replica.address)
    assert done.returncode == 0, done.stderr  # a folder is packaged, as pipeline.check takes it
    assert "submitted folder-" in done.stdout
    verdict = subprocess.run(
        [sys.executable, "-m", "pipeline.check", str(folder)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert verdict.returncode == 0 and '"ok": true' in verdict.stdout
    (folder / "topology.py").write_text("def build():\n    raise ValueError('no')\n")
    verdict = subprocess.run(
        [sys.executable, "-m", "pipeline.check", str(folder)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert verdict.returncode == 3 and '"ok": false' in verdict.stdout
