"""Hostile input at every edge: property-based tests and fuzz runs (hypothesis).

Pure checks (names, config, packages, record decoding) run many small examples; the
request handlers and the record readers are fuzzed against a real replica process on a
real ZooKeeper, which must keep serving and answer every bad call with a clear status.
"""

from __future__ import annotations

import contextlib
import io
import json
import stat
import warnings
import zipfile
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from cluster.api import pb, records, rpc
from cluster.apierror import ApiError
from cluster.names import check_digest_arg, check_name, check_request_id
from cluster.paths import Paths
from code_sync.errors import PackageRejected
from code_sync.package import check_package_bytes
from nimbus.client import NimbusClient
from nimbus.server.security.limits import (
    MAX_CONFIG_DEPTH,
    check_submit_header,
    check_topology_config,
)
from tests.cluster import Replica, wait_for_agreed_leader
from tests.replica_fixtures import Spawn, package, submit, sync_flags
from tests.waiting import wait_until

PATHS = Paths("/storm")
FAST = settings(max_examples=150, deadline=None, database=None)
INVALID = grpc.StatusCode.INVALID_ARGUMENT

# -- names ----------------------------------------------------------------------------------

NAMEISH = st.one_of(
    st.text(max_size=140),
    st.text(alphabet="aZ09._-/\\:\x00 ", max_size=140),
    st.sampled_from([".", "..", "", "a" * 128, "a" * 129, "../x", "x/y", "ok-name_1.2"]),
)


@FAST
@given(NAMEISH)
def test_name_checks_pass_only_safe_znode_names(text: str) -> None:
    for check in (check_name, check_request_id):
        try:
            accepted = check(text)
        except ApiError as e:
            assert e.code == INVALID
            assert repr(text)[:40] in e.message and "use 1-128 of" in e.message
            continue
        if accepted or check is check_name:  # an empty request id means "none given"
            assert accepted == text and 1 <= len(text) <= 128 and text not in (".", "..")
            assert text.isascii() and "/" not in text and "\x00" not in text
            assert "\\" not in text and ":" not in text and " " not in text


@FAST
@given(st.text(alphabet="0123456789abcdefABCDEFg", max_size=70))
def test_digest_check_accepts_exactly_sha256_hex(text: str) -> None:
    try:
        check_digest_arg(text)
    except ApiError as e:
        assert e.code == INVALID and "64 lowercase hex" in e.message
    else:
        assert len(text) == 64 and set(text) <= set("0123456789abcdef")


# -- topology config and the submit header --------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@FAST
@given(st.one_of(JSON.map(json.dumps), st.text(max_size=200), st.just("[" * 5000)))
def test_config_is_an_object_with_safe_keys_or_a_named_refusal(text: str) -> None:
    try:
        value = check_topology_config(text)
    except ApiError as e:
        assert e.code == INVALID and e.message.startswith("topology config")
        return
    assert isinstance(value, dict)
    assert all(k and len(k) <= 128 and k.isascii() and "/" not in k for k in value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": ' * (MAX_CONFIG_DEPTH + 1) + "1" + "}" * (MAX_CONFIG_DEPTH + 1), "nests 9 deep"),
        ('{"a b": 1}', "key 'a b' is not"),
        ("[1]", "must be a JSON object, got list"),
        ("{", "not valid JSON"),
        (json.dumps({"k": "x" * 70_000}), "over the 65536-byte limit"),
    ],
    ids=["deep", "bad-key", "not-object", "not-json", "too-big"],
)
def test_config_limits_are_named(text: str, message: str) -> None:
    with pytest.raises(ApiError, match=message):
        check_topology_config(text)


def test_a_good_config_and_header_limits() -> None:
    assert check_topology_config('{"topology.debug": false}') == {"topology.debug": False}
    with pytest.raises(ApiError, match=r"workers must be between 1 and 4096 \(0: one\), got -1"):
        check_submit_header(pb.SubmitHeader(num_workers=-1))
    with pytest.raises(ApiError, match="package size must be >= 0"):
        check_submit_header(pb.SubmitHeader(package_size=-5))


# -- packages -------------------------------------------------------------------------------

PART = st.sampled_from(["a", "b", "..", ".", "", "topology.py", "\\", "c:", "/", "x\x00y"])
ENTRY = st.tuples(
    st.lists(PART, min_size=1, max_size=4).map("/".join),
    st.sampled_from([stat.S_IFREG | 0o644, stat.S_IFLNK | 0o777, stat.S_IFDIR | 0o755, 0]),
    st.binary(max_size=20),
)


def hostile_zip(entries: list[tuple[str, int, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore")  # duplicate names are the point
        archive.writestr("topology.py", b"def build(): ...\n")
        for name, mode, content in entries:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = mode << 16
            archive.writestr(info, content)
    return buffer.getvalue()


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(ENTRY, max_size=5))
def test_an_accepted_package_unpacks_only_inside_its_folder(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, int, bytes]]
) -> None:
    data = hostile_zip(entries)
    try:
        check_package_bytes(data, max_uncompressed_bytes=1 << 20)
    except PackageRejected as e:
        assert str(e)  # says what is wrong
        return
    target = tmp_path_factory.mktemp("unpack").resolve()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = [i.orig_filename for i in archive.infolist()]
        assert len(names) == len(set(names)), "a duplicate entry was accepted"
        for info in archive.infolist():
            assert not stat.S_ISLNK(info.external_attr >> 16), "a link was accepted"
            assert (target / info.orig_filename).resolve().is_relative_to(target)
        archive.extractall(target)
    for path in target.rglob("*"):
        assert path.resolve().is_relative_to(target) and not path.is_symlink()


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(min_size=1, max_size=2048), st.integers(0, 4000), st.integers(0, 255))
def test_fuzz_package_validator_mutated_bytes(noise: bytes, at: int, value: int) -> None:
    base = bytearray(hostile_zip([("lib/a.py", stat.S_IFREG | 0o644, noise)]))
    base[at % len(base)] = value
    data = bytes(base[: len(base) - (at % 7)]) + noise[: at % 5]
    try:
        check_package_bytes(data, max_uncompressed_bytes=1 << 20)
    except PackageRejected as e:
        assert str(e)


# -- protobuf records as read from ZooKeeper ------------------------------------------------

RECORD_TYPES = [
    records.StormBase,
    records.Assignment,
    records.SupervisorInfo,
    records.NimbusSummary,
    records.LeaderEpoch,
    records.EpochRecord,
    records.WorkerHeartbeat,
    records.ErrorInfo,
    records.RequestOutcome,
]


@settings(max_examples=300, deadline=None, database=None)
@given(st.sampled_from(RECORD_TYPES), st.binary(max_size=256))
def test_fuzz_record_decoding_raises_only_decode_error(kind: Any, data: bytes) -> None:
    """Every reader catches DecodeError: nothing else may come out of parsing."""
    with contextlib.suppress(DecodeError):
        kind.FromString(data)


# -- against a real replica -----------------------------------------------------------------

OK_CODES = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.DATA_LOSS,
}
NAMES = st.one_of(st.sampled_from(["wc", "nope", "", "..", "a/b"]), st.text(max_size=140))
INT32 = st.integers(-(2**31), 2**31 - 1)
REQUESTS = st.one_of(
    st.builds(
        lambda n, w: ("KillTopology", pb.KillTopologyRequest(name=n, wait_s=w)), NAMES, INT32
    ),
    st.builds(lambda n: ("ActivateTopology", pb.TopologyNameRequest(name=n)), NAMES),
    st.builds(lambda n: ("DeactivateTopology", pb.TopologyNameRequest(name=n)), NAMES),
    st.builds(
        lambda n, w, p, r: (
            "RebalanceTopology",
            pb.RebalanceTopologyRequest(
                name=n, num_workers=w, component_parallelism=p, wait_s=0, client_request_id=r
            ),
        ),
        NAMES,
        INT32,
        st.dictionaries(st.text(max_size=10), INT32, max_size=3),
        st.text(max_size=20),
    ),
    st.builds(lambda n: ("GetTopology", pb.GetTopologyRequest(name=n)), NAMES),
    st.builds(
        lambda d, o: ("DownloadCode", pb.DownloadCodeRequest(digest=d, offset=o)),
        st.text(max_size=70),
        st.integers(-(2**63), 2**63 - 1),
    ),
    st.builds(
        lambda h: ("PushCode", h),
        st.builds(
            pb.PushCodeHeader,
            topology_id=st.one_of(NAMES, st.just("wc-1-1")),
            digest=st.one_of(st.text(max_size=70), st.just("0" * 64)),
            size=st.integers(-(2**63), 2**63 - 1),
        ),
    ),
    st.builds(
        lambda h: ("SubmitTopology", h),
        st.builds(
            pb.SubmitHeader,
            name=NAMES,
            config_json=st.one_of(st.text(max_size=50), JSON.map(json.dumps)),
            expected_digest=st.one_of(st.text(max_size=70), st.just("0" * 64)),
            package_size=st.integers(-(2**63), 2**63 - 1),
            client_request_id=st.text(max_size=20),
            owner=st.text(max_size=300),
            num_workers=INT32,
        ),
    ),
)


def call(stub: rpc.NimbusStub, method: str, request: Any) -> tuple[grpc.StatusCode, str]:
    try:
        if method == "SubmitTopology":
            stub.SubmitTopology(iter([pb.SubmitTopologyRequest(header=request)]), timeout=10)
        elif method == "PushCode":
            stub.PushCode(iter([pb.PushCodeRequest(header=request)]), timeout=10)
        elif method == "DownloadCode":
            list(stub.DownloadCode(request, timeout=10))
        else:
            getattr(stub, method)(request, timeout=10)
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def serving(replica: Replica) -> None:
    assert replica.proc is not None and replica.proc.poll() is None, replica.log_tail()
    reply = replica.stub().GetAllNimbusAddresses(pb.GetAllNimbusAddressesRequest(), timeout=5)
    assert replica.address in [n.address for n in reply.nimbuses]  # others may be forged
    replica.stub().ListTopologies(pb.ListTopologiesRequest(), timeout=5)
    summary = replica.stub().GetClusterSummary(pb.GetClusterSummaryRequest(), timeout=5)
    assert replica.address in [n.address for n in summary.nimbuses]


def test_fuzz_request_handlers_on_a_real_replica(spawn: Spawn, tmp_path: Path) -> None:
    replica = spawn(extra=sync_flags(replicas=1, min_replicas=1))
    wait_for_agreed_leader([replica], timeout=30)
    with NimbusClient([replica.address]) as client:
        submit(client, package(tmp_path, "wc")[0], "wc")
    stub = replica.stub()
    raw = {
        m: replica.channel().unary_unary(f"/storm.nimbus.v1.Nimbus/{m}", None, None)
        for m in ("KillTopology", "RebalanceTopology", "GetTopology", "GetLeaderAddress")
    }

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(REQUESTS)
    def handlers(item: tuple[str, Any]) -> None:
        method, request = item
        code, details = call(stub, method, request)
        assert code in OK_CODES, f"{method}({request}) -> {code.name}: {details}"
        if code != grpc.StatusCode.OK:
            assert details.strip(), f"{method} refused without saying why"

    @settings(max_examples=30, deadline=None, database=None)
    @given(st.sampled_from(sorted(raw)), st.binary(max_size=64))
    def raw_bytes(method: str, data: bytes) -> None:
        try:
            raw[method](data, timeout=10)
        except grpc.RpcError as e:
            assert e.code() != grpc.StatusCode.UNKNOWN, e.details()

    handlers()
    raw_bytes()
    serving(replica)


def test_corrupt_records_are_reported_and_skipped_by_a_real_replica(
    spawn: Spawn, zk_client: KazooClient, tmp_path: Path
) -> None:
    replica = spawn(extra=sync_flags(replicas=1, min_replicas=1, sync_interval=0.1))
    wait_for_agreed_leader([replica], timeout=30)
    with NimbusClient([replica.address]) as client:
        submit(client, package(tmp_path, "good")[0], "good")
    targets = [
        PATHS.storm("bad-1-1"),
        PATHS.assignment("bad-1-1"),
        PATHS.assignment(client.describe("good").summary.id),
        PATHS.supervisor("bad-sup"),
        f"{PATHS.nimbuses}/127.0.0.1:1",
        f"{PATHS.workerbeats}/bad-1-1/bad-sup-0",
        PATHS.request("bad-request"),
    ]

    def put(path: str, data: bytes) -> None:
        # The leader legitimately removes some of these (the assignment and heartbeats
        # of a topology not in /storms), possibly between our create and set.
        for _ in range(20):
            try:
                zk_client.create(path, data, makepath=True)
                return
            except NodeExistsError:
                pass
            try:
                zk_client.set(path, data)
                return
            except NoNodeError:
                continue
        raise AssertionError(f"could not write {path}: it keeps appearing and vanishing")

    for path in targets:  # surely damaged: a truncated varint
        put(path, b"\x08\xff\xff")
    wait_until(
        lambda: "skipping damaged record" in replica.log_path.read_text(errors="replace"),
        15,
        message="the damaged /storms record reported in the replica's log",
    )

    @settings(max_examples=12, deadline=None, database=None)
    @given(st.binary(max_size=48))
    def corrupt(data: bytes) -> None:
        for path in targets:
            put(path, data)
        serving(replica)

    corrupt()
    with NimbusClient([replica.address]) as client:
        names = {t.name for t in client.list_topologies().topologies}
        assert "good" in names
        assert client.describe("good").summary.status == records.ACTIVE
        submit(client, package(tmp_path, "after")[0], "after")  # the leader still writes
    serving(replica)


@pytest.mark.parametrize("value", ["wc\n", "a" * 64 + "\n"])
def test_a_trailing_newline_is_not_a_valid_name_or_digest(value: str) -> None:
    """``$`` in a pattern also matches before a final newline: the checks must not."""
    with pytest.raises(ApiError, match="invalid"):
        check_digest_arg(value) if len(value) > 60 else check_name(value)
