"""What the CLI says when its flags do not fit the replicas: one line naming what is wrong
and which flag to change, at once, with no retries until the deadline and none of gRPC
core's handshake logs on stderr. Real replica processes, real TLS, the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.cluster import REPO, Replica
from tests.replica_fixtures import Spawn, sync_flags
from tests.security_helpers import make_pki, write_secret
from tests.waiting import wait_until

TOKEN = "operator-token-0123456789abcdef"
WRONG = "wrong-token-00000000000000000000"
#: Well under the 30 s deadline of reads and changes the CLI would otherwise use.
AT_ONCE_S = 5.0


def cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NIMBUS_", "GRPC_"))}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "nimbus.cli", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=120, env=env)  # fmt: skip
    return done, time.monotonic() - started


def one_line(done: subprocess.CompletedProcess[str], took: float) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done
    assert len(lines) == 1, done.stderr
    assert took < AT_ONCE_S, f"{took:.1f} s: retried instead of stopping"
    return lines[0]


def ready(replica: Replica, *flags: str) -> None:
    wait_until(lambda: cli("nimbuses", "--seeds", replica.address, *flags)[0].returncode == 0,
               timeout=30, interval=0.2, message="the replica answers")  # fmt: skip


def test_tls_mismatches_and_refused_tokens_are_named_in_one_line(
    spawn: Spawn, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    tokens = write_secret(tmp_path / "tokens", TOKEN + "\n")
    wrong = write_secret(tmp_path / "wrong", WRONG + "\n")
    flags = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    replica = spawn(extra=sync_flags(replicas=1, min_replicas=1) + flags
                    + ("--token-file", str(tokens)))  # fmt: skip
    seeds = ("--seeds", replica.address)
    trusted = ("--tls", "true", "--tls-ca", str(pki.ca))
    ready(replica, *trusted)

    said = one_line(*cli("nimbuses", *seeds))
    assert "TLS mismatch" in said and "speaks TLS and this client does not" in said
    assert "--tls true" in said
    said = one_line(*cli("kill", "wc", *seeds, "--tls", "true"))  # the system's roots
    assert "TLS mismatch" in said and "CERTIFICATE_VERIFY_FAILED" in said and "--tls-ca" in said
    said = one_line(*cli("list", *seeds, "--tls", "true", "--tls-ca", str(pki.other_ca)))
    assert "CA this client does not trust" in said
    said = one_line(*cli("list", *seeds, *trusted, "--tls-server-name", "elsewhere.example"))
    assert "does not name the address" in said and "--tls-server-name" in said

    said = one_line(*cli("kill", "wc", *seeds, *trusted))
    assert said.startswith("nimbus kill: UNAUTHENTICATED: KillTopology needs a bearer token")
    assert "--token-file" in said and "NIMBUS_TOKEN" in said
    said = one_line(*cli("kill", "wc", *seeds, *trusted, "--token-file", str(wrong)))
    assert "refused this client's bearer token on KillTopology" in said
    assert "GetLeaderAddress" not in said, "named the call made, not discovery's"
    done, _ = cli("kill", "wc", *seeds, *trusted, "--token-file", str(tokens))
    assert "NOT_FOUND" in done.stderr, "with the token the call reaches its handler"


def test_tls_to_a_plaintext_replica_is_named(spawn: Spawn, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    replica = spawn(extra=sync_flags(replicas=1, min_replicas=1))
    ready(replica)
    said = one_line(*cli("nimbuses", "--seeds", replica.address, "--tls", "true",
                         "--tls-ca", str(pki.ca)))  # fmt: skip
    assert "TLS mismatch" in said and "the replica does not" in said and "drop --tls" in said


def test_rebalance_to_zero_workers_is_refused() -> None:
    for flag in (("--workers", "0"), ("--parallelism", "split=0")):
        done, _ = cli("rebalance", "wc", "--seeds", "127.0.0.1:1", *flag)
        assert done.returncode != 0
        assert "at least 1" in done.stderr, done.stderr
