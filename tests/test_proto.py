"""The generated API stubs: fresh, comparable, usable, and no top-level ``proto`` package.

The stubs in cluster/api/v1 are committed; ``python proto/generate.py`` is the one way to
make them. These tests regenerate into a temporary directory and compare byte for byte,
prove that the comparison does catch a stale stub, round-trip a few records, and check
that the repo does not ship an importable ``proto`` package (proto-plus owns the name).
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cluster.api import SERVICE_NAME, pb, records, rpc

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = Path("cluster", "api", "v1")
COMMITTED_DIR = REPO_ROOT / PACKAGE_DIR
GENERATOR = REPO_ROOT / "proto" / "generate.py"
REGENERATE_COMMAND = "python proto/generate.py"


def stub_files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative posix path -> bytes), minus bytecode."""
    files: dict[str, bytes] = {}
    if not directory.is_dir():
        return files
    for path in sorted(directory.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        files[path.relative_to(directory).as_posix()] = path.read_bytes()
    return files


def compare_stubs(committed_dir: Path, fresh_dir: Path) -> list[str]:
    """Differences between the committed stubs and freshly generated ones.

    One message per stale, missing or extra file, each naming the file (as a repo path)
    and the command that fixes it. Empty when the two trees are identical.
    """
    committed = stub_files(committed_dir)
    fresh = stub_files(fresh_dir)
    fix = f"regenerate with `{REGENERATE_COMMAND}` from the repo root"
    problems: list[str] = []
    for name in sorted(fresh.keys() | committed.keys()):
        shown = (PACKAGE_DIR / name).as_posix()
        if name not in committed:
            problems.append(f"{shown} is missing: {fix}")
        elif name not in fresh:
            problems.append(f"{shown} is not produced by the generator (extra file): {fix}")
        elif committed[name] != fresh[name]:
            diff = difflib.unified_diff(
                committed[name].decode("utf-8", "replace").splitlines(),
                fresh[name].decode("utf-8", "replace").splitlines(),
                "committed",
                "generated",
                lineterm="",
                n=1,
            )
            excerpt = "\n".join(list(diff)[:12])
            problems.append(f"{shown} is stale: {fix}\n{textwrap.indent(excerpt, '    ')}")
    return problems


def run_generator(out_root: Path) -> Path:
    """Run the real regenerate command into ``out_root``; return the stub directory."""
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--out", str(out_root)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{REGENERATE_COMMAND} failed:\n{result.stdout}{result.stderr}"
    return out_root / PACKAGE_DIR


@pytest.fixture(scope="module")
def fresh_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_generator(tmp_path_factory.mktemp("fresh-stubs"))


# --- (a) staleness ------------------------------------------------------------------------


def test_committed_stubs_match_generator(fresh_dir: Path) -> None:
    assert stub_files(fresh_dir), "the generator produced no files"
    problems = compare_stubs(COMMITTED_DIR, fresh_dir)
    assert not problems, "generated API stubs are out of date:\n" + "\n".join(problems)


def test_generator_outputs_expected_files(fresh_dir: Path) -> None:
    assert sorted(stub_files(fresh_dir)) == [
        "__init__.py",
        "nimbus_pb2.py",
        "nimbus_pb2.pyi",
        "nimbus_pb2_grpc.py",
        "nimbus_pb2_grpc.pyi",
        "records_pb2.py",
        "records_pb2.pyi",
    ]
    assert (fresh_dir / "__init__.py").read_bytes() == b""


# --- (b) the comparison can fail ----------------------------------------------------------


def test_comparison_reports_stale_missing_and_extra(fresh_dir: Path, tmp_path: Path) -> None:
    tampered = tmp_path / PACKAGE_DIR
    shutil.copytree(COMMITTED_DIR, tampered, ignore=shutil.ignore_patterns("__pycache__"))
    assert compare_stubs(tampered, fresh_dir) == []  # an exact copy is clean

    stale = tampered / "records_pb2.py"
    stale.write_bytes(stale.read_bytes().replace(b"LeaderEpoch", b"LeaderEpocH", 1))
    (tampered / "nimbus_pb2_grpc.pyi").unlink()
    (tampered / "old_pb2.py").write_text("# left over from a deleted .proto\n")

    problems = compare_stubs(tampered, fresh_dir)
    assert len(problems) == 3, problems
    by_file = {p.split(" ", 1)[0]: p for p in problems}
    assert "is stale" in by_file["cluster/api/v1/records_pb2.py"]
    assert "LeaderEpocH" in by_file["cluster/api/v1/records_pb2.py"]  # diff excerpt shown
    assert "is missing" in by_file["cluster/api/v1/nimbus_pb2_grpc.pyi"]
    assert "extra file" in by_file["cluster/api/v1/old_pb2.py"]
    assert all(REGENERATE_COMMAND in p for p in problems)

    # ... and the regenerate command repairs the tree (rewrites, recreates, removes).
    run_generator(tmp_path)
    assert compare_stubs(tampered, fresh_dir) == []


# --- (c) records round-trip ---------------------------------------------------------------


def test_storm_base_roundtrip() -> None:
    base = records.StormBase(
        name="word-count",
        status=records.ACTIVE,
        owner="alice",
        epoch=7,
        digest="ab" * 32,
        launch_time_ms=1_700_000_000_123,
        num_workers=3,
        component_parallelism={"spout": 2, "count": 4},
        config_json='{"topology.debug": false}',
        package_size=1 << 33,
        client_request_id="req-1",
        kill_wait_s=30,
    )
    back = records.StormBase.FromString(base.SerializeToString())
    assert back == base
    assert back.name == "word-count"
    assert back.status == records.ACTIVE
    assert records.TopologyStatus.Name(back.status) == "ACTIVE"
    assert back.epoch == 7
    assert dict(back.component_parallelism) == {"spout": 2, "count": 4}
    assert back.package_size == 1 << 33  # int64, not truncated
    assert back.kill_wait_s == 30


def test_assignment_and_outcome_roundtrip() -> None:
    assignment = records.Assignment(
        topology_id="word-count-1-1700000000",
        epoch=3,
        slots=[
            records.SlotAssignment(slot=0, supervisor_id="sup-a", host="h1", port=6700),
            records.SlotAssignment(slot=1, supervisor_id="sup-b", host="h2", port=6701),
        ],
        digest="cd" * 32,
        assigned_ms=42,
    )
    back = records.Assignment.FromString(assignment.SerializeToString())
    assert [(s.slot, s.supervisor_id, s.host, s.port) for s in back.slots] == [
        (0, "sup-a", "h1", 6700),
        (1, "sup-b", "h2", 6701),
    ]
    assert (back.topology_id, back.epoch, back.assigned_ms) == ("word-count-1-1700000000", 3, 42)

    outcome = records.RequestOutcome(
        request_id="r-9", method="KillTopology", grpc_code=9, message="not leader", epoch=5
    )
    parsed = records.RequestOutcome()
    parsed.ParseFromString(outcome.SerializeToString())
    assert (parsed.request_id, parsed.method, parsed.grpc_code, parsed.epoch) == (
        "r-9",
        "KillTopology",
        9,
        5,
    )
    assert parsed.topology_id == ""  # unset proto3 scalar reads as its default


def test_leader_epoch_wire_bytes_are_stable() -> None:
    """Renumbering a field would change what is already stored in ZooKeeper."""
    record = records.LeaderEpoch(epoch=5, holder="h:1", lock_node="/l", since_ms=9)
    assert record.SerializeToString().hex() == "0805" + "1203683a31" + "1a022f6c" + "2009"
    assert records.LeaderEpoch.FromString(bytes.fromhex("0805")).epoch == 5


def test_leader_written_records_carry_an_int64_epoch() -> None:
    int64 = records.LeaderEpoch.DESCRIPTOR.fields_by_name["epoch"].type
    for message in (
        records.LeaderEpoch,
        records.EpochRecord,
        records.NimbusSummary,
        records.StormBase,
        records.Assignment,
        records.ErrorInfo,
        records.RequestOutcome,
    ):
        field = message.DESCRIPTOR.fields_by_name.get("epoch")
        assert field is not None and field.type == int64, message.DESCRIPTOR.full_name


def test_enum_values_are_stable() -> None:
    assert [records.ROLE_UNSPECIFIED, records.FOLLOWER, records.LEADER] == [0, 1, 2]
    assert [
        records.STATUS_UNSPECIFIED,
        records.ACTIVE,
        records.INACTIVE,
        records.KILLED,
        records.REBALANCING,
        records.CODE_MISSING,
    ] == [0, 1, 2, 3, 4, 5]


def test_api_messages_roundtrip() -> None:
    header = pb.SubmitTopologyRequest(
        header=pb.SubmitHeader(name="wc", expected_digest="ef" * 32, package_size=10)
    )
    chunk = pb.SubmitTopologyRequest(chunk=b"\x00\x01zip")
    assert (
        pb.SubmitTopologyRequest.FromString(header.SerializeToString()).WhichOneof("item")
        == "header"
    )
    assert pb.SubmitTopologyRequest.FromString(chunk.SerializeToString()).chunk == b"\x00\x01zip"

    detail = pb.TopologyDetail(
        summary=pb.TopologySummary(id="wc-1", name="wc", status=records.KILLED, uptime_s=1.5),
        assignment=records.Assignment(topology_id="wc-1", epoch=2),
        errors=[records.ErrorInfo(component="split", message="boom", epoch=2)],
        component_parallelism={"split": 8},
    )
    back = pb.TopologyDetail.FromString(detail.SerializeToString())
    assert back.summary.status == records.KILLED
    assert back.summary.uptime_s == 1.5
    assert back.assignment.epoch == 2
    assert back.errors[0].message == "boom"
    assert back.component_parallelism["split"] == 8


def test_service_surface() -> None:
    assert SERVICE_NAME == "storm.nimbus.v1.Nimbus"
    methods = pb.DESCRIPTOR.services_by_name["Nimbus"].methods_by_name
    assert sorted(methods) == sorted(
        [
            "GetLeaderAddress",
            "GetAllNimbusAddresses",
            "SubmitTopology",
            "KillTopology",
            "ActivateTopology",
            "DeactivateTopology",
            "RebalanceTopology",
            "Handover",
            "ListTopologies",
            "GetTopology",
            "GetClusterSummary",
            "DownloadCode",
            "PushCode",
        ]
    )
    assert methods["SubmitTopology"].client_streaming
    assert methods["DownloadCode"].server_streaming
    assert methods["PushCode"].client_streaming and not methods["PushCode"].server_streaming
    assert callable(rpc.add_NimbusServicer_to_server)
    assert hasattr(rpc, "NimbusStub") and hasattr(rpc, "NimbusServicer")


# --- (d) no top-level `proto` package ------------------------------------------------------


def test_no_proto_package_in_repo() -> None:
    for entry in REPO_ROOT.iterdir():
        if entry.name in {".git", ".venv"}:
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            assert entry.name != "proto", f"{entry} is a regular package named proto"
    assert not (REPO_ROOT / "proto.py").exists()
    inits = sorted(str(p) for p in (REPO_ROOT / "proto").rglob("__init__.py"))
    assert not inits, f"proto/ must hold no Python package: {inits}"


def test_proto_is_not_importable_as_a_package_from_repo_root(tmp_path: Path) -> None:
    """From the repo root, `proto` is at most a PEP 420 namespace portion (proto/ is a
    plain directory on sys.path), which never shadows an installed `proto` package such as
    proto-plus: a regular package later on sys.path wins. Checked in a fresh interpreter
    whose sys.path starts with the repo root, as when running scripts from the checkout.
    """
    fake = tmp_path / "site" / "proto"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("MARK = 'installed proto'\n")
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        repo = {str(REPO_ROOT)!r}
        sys.path[:0] = [repo]
        spec = importlib.util.find_spec("proto")
        if spec is not None and spec.origin not in (None, "namespace"):  # not PEP 420
            assert not spec.origin.startswith(repo), f"proto is in the repo: {{spec.origin}}"
        # A regular `proto` package right after the repo root must win over proto/.
        sys.path.insert(1, {str(tmp_path / "site")!r})
        importlib.invalidate_caches()
        sys.modules.pop("proto", None)
        import proto
        assert proto.MARK == "installed proto", proto
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
