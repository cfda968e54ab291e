"""gRPC TLS, client certificates and bearer tokens, against replicas run as processes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.api import pb, records, rpc
from cluster.errors import ConfigError
from cluster.factory import make_channel
from cluster.security.client import ClientSecurity
from cluster.security.tls import load_client_tls, load_server_tls
from cluster.security.tokens import TokenSet, bearer, load_client_token, parse_tokens
from nimbus.cli import main
from nimbus.client import NimbusCallError, NimbusClient
from nimbus.server.security.interceptor import needs_token
from tests.cluster import Replica
from tests.processes import nimbus_cli
from tests.replica_fixtures import Spawn, holds, package, submit, sync_flags
from tests.security_helpers import Pki, make_pki, write_secret
from tests.waiting import wait_until

TOKEN = "operator-token-0123456789abcdef"
OTHER_TOKEN = "rotated-token-fedcba9876543210"  # also accepted: a file may hold several
WRONG = "wrong-token-00000000000000000000"


def tls(pki: Pki, *, client_cert: bool = False, stranger: bool = False) -> ClientSecurity:
    if stranger:
        return ClientSecurity(
            tls=load_client_tls(
                enabled=True, ca=str(pki.ca), cert=str(pki.stranger_cert), key=str(pki.stranger_key)
            )
        )
    cert = str(pki.client_cert) if client_cert else ""
    key = str(pki.client_key) if client_cert else ""
    return ClientSecurity(tls=load_client_tls(enabled=True, ca=str(pki.ca), cert=cert, key=key))


def with_token(security: ClientSecurity, token: str | None) -> ClientSecurity:
    return ClientSecurity(tls=security.tls, token=token)


def code(fn: object) -> grpc.StatusCode | None:
    try:
        fn()  # type: ignore[operator]
    except grpc.RpcError as e:
        return e.code()
    return None


def wait_leading(replicas: list[Replica], security: ClientSecurity) -> None:
    def ready() -> bool:
        with NimbusClient([r.address for r in replicas], security=security, attempts=1) as c:
            return c.leader().epoch > 0 and len(c.nimbuses().nimbuses) == len(replicas)

    wait_until(ready, 30, message="a leader over TLS")


def test_with_tls_and_tokens_only_the_right_token_changes_anything(
    spawn: Spawn, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    tokens = write_secret(tmp_path / "tokens", f"# accepted\n{TOKEN}\n{OTHER_TOKEN}\n")
    mine = write_secret(tmp_path / "my-token", TOKEN)
    flags = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    replica = spawn(
        extra=sync_flags(replicas=1, min_replicas=1) + flags + ("--token-file", str(tokens))
    )
    anonymous = tls(pki)
    wait_leading([replica], anonymous)
    stub = rpc.NimbusStub(make_channel(replica.address, anonymous))
    plain = rpc.NimbusStub(make_channel(replica.address, ClientSecurity()))
    assert code(lambda: plain.GetLeaderAddress(pb.GetLeaderAddressRequest(), timeout=5)) == (
        grpc.StatusCode.UNAVAILABLE  # no plaintext on a TLS port
    )
    # Reads are open by default; health always is (Kubernetes probes carry no token).
    assert stub.ListTopologies(pb.ListTopologiesRequest(), timeout=5).topologies == []
    health = health_pb2_grpc.HealthStub(make_channel(replica.address, anonymous))
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1

    path, digest = package(tmp_path, "wc")
    for token in (None, WRONG):
        with NimbusClient([replica.address], security=with_token(anonymous, token)) as client:
            with pytest.raises(NimbusCallError) as refused:
                submit(client, path, "wc")
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert "token" in str(refused.value)
    assert not (replica.code_dir / digest).exists(), "a refused upload reached the store"
    assert stub.ListTopologies(pb.ListTopologiesRequest(), timeout=5).topologies == []
    wrong = rpc.NimbusStub(make_channel(replica.address, with_token(anonymous, WRONG)))
    assert code(lambda: wrong.ListTopologies(pb.ListTopologiesRequest(), timeout=5)) == (
        grpc.StatusCode.UNAUTHENTICATED  # a wrong token is refused even where none is needed
    )

    # The CLI with the right options works; without the token it is refused and says so.
    common = ("--seeds", replica.address, "--tls", "true", "--tls-ca", str(pki.ca))
    done = nimbus_cli("submit", str(path), "--name", "wc", *common, "--token-file", str(mine))
    assert done.returncode == 0, done.stderr
    assert holds(replica, digest)
    refused_kill = nimbus_cli("kill", "wc", *common)
    assert refused_kill.returncode == 1
    assert "UNAUTHENTICATED" in refused_kill.stderr
    # A second accepted token (rotation) works too, from the environment.
    ok = nimbus_cli("deactivate", "wc", *common, "--json", env={"NIMBUS_TOKEN": OTHER_TOKEN})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "INACTIVE"
    with NimbusClient([replica.address], security=anonymous) as client:
        assert client.describe("wc").summary.status == records.INACTIVE


def test_client_certificates_and_tokens_for_reads_with_peers_syncing_code(
    spawn: Spawn, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    tokens = write_secret(tmp_path / "tokens", TOKEN)
    flags = (
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca), "--tls-ca", str(pki.ca),
        "--token-file", str(tokens), "--auth-reads", "true",
    )  # fmt: skip
    replicas = [spawn(extra=sync_flags(replicas=2, min_replicas=2) + flags) for _ in range(2)]
    trusted = with_token(tls(pki, client_cert=True), TOKEN)
    wait_leading(replicas, trusted)
    address = replicas[0].address
    for who in (tls(pki), with_token(tls(pki, stranger=True), TOKEN)):
        stub = rpc.NimbusStub(make_channel(address, who))
        assert code(lambda s=stub: s.GetLeaderAddress(pb.GetLeaderAddressRequest(), timeout=5)) in (
            grpc.StatusCode.UNAVAILABLE,  # the handshake fails: no or an untrusted certificate
        )
    no_token = rpc.NimbusStub(make_channel(address, tls(pki, client_cert=True)))
    assert code(lambda: no_token.ListTopologies(pb.ListTopologiesRequest(), timeout=5)) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    health = health_pb2_grpc.HealthStub(make_channel(address, tls(pki, client_cert=True)))
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1

    # Acknowledged only once both replicas hold it: the follower fetched it from its peer
    # over mutual TLS with the replica's own token.
    path, digest = package(tmp_path, "wc")
    with NimbusClient([r.address for r in replicas], security=trusted) as client:
        reply = submit(client, path, "wc", hashlib.sha256(path.read_bytes()).hexdigest())
        assert sorted(reply.code_replicas) == sorted(r.address for r in replicas)
        assert client.describe("wc").summary.status == records.ACTIVE
    assert all(holds(r, digest) for r in replicas)


def test_bad_security_settings_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pki = make_pki(tmp_path / "pki")
    with pytest.raises(ConfigError, match="both --tls-cert and --tls-key"):
        load_server_tls(str(pki.server_cert), "")
    with pytest.raises(ConfigError, match="holds no PEM 'CERTIFICATE' block"):
        load_server_tls(str(pki.server_key), str(pki.server_key))
    with pytest.raises(ConfigError, match="needs --tls-cert"):
        load_server_tls("", "", str(pki.ca))
    with pytest.raises(ConfigError, match="cannot read TLS CA"):
        load_client_tls(enabled=True, ca=str(tmp_path / "nope.crt"))
    with pytest.raises(ConfigError, match="16 to 4096 visible ASCII"):
        parse_tokens("short\n", "tokens")
    with pytest.raises(ConfigError, match="holds no token"):
        parse_tokens("# only a comment\n\n", "tokens")
    assert load_client_token(environ={"NIMBUS_TOKEN": TOKEN}) == TOKEN
    assert load_client_token(environ={}) is None
    accepted = TokenSet((TOKEN, OTHER_TOKEN))
    assert accepted.accepts(OTHER_TOKEN) and not accepted.accepts(TOKEN[:-1])
    assert "0123" not in repr(accepted)
    assert bearer((("authorization", f"Bearer {TOKEN}"),)) == TOKEN
    assert bearer((("authorization", "Basic xyz"),)) == ""
    assert bearer(()) is None
    mutating = ["SubmitTopology", "KillTopology", "ActivateTopology", "RebalanceTopology"]
    for name in mutating:
        assert needs_token(f"/storm.nimbus.v1.Nimbus/{name}", auth_reads=False)
    assert needs_token("/storm.nimbus.v1.Nimbus/SomethingNew", auth_reads=False)
    assert not needs_token("/storm.nimbus.v1.Nimbus/GetTopology", auth_reads=False)
    assert needs_token("/storm.nimbus.v1.Nimbus/GetTopology", auth_reads=True)
    assert not needs_token("/grpc.health.v1.Health/Check", auth_reads=True)
    # serve refuses before touching anything, naming the flag
    result = nimbus_cli(
        "serve", "--zookeeper", "127.0.0.1:1", "--listen", "127.0.0.1:0",
        "--advertise", "127.0.0.1:1", "--auth-reads", "true",
    )  # fmt: skip
    assert result.returncode == 2 and "--auth-reads needs --token-file" in result.stderr
    assert main(["leader", "--seeds", "127.0.0.1:1", "--tls-cert", str(pki.client_cert)]) == 2
    assert "both --tls-cert and --tls-key" in capsys.readouterr().err
