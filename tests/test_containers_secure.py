"""``deploy/containers/up --secrets DIR`` and ``deploy/containers/data``, with podman.

The secrets are what an operator has: files owned by the host's root, mode 600, in one
folder. The certificate names neither the replicas' addresses nor 127.0.0.1, only the
name in ``tls-server-name``, so every TLS client (the readiness probe, the host's CLI,
replicas pushing code to their peers, the supervisor) must be told that name. The image
fixture is ``tests/test_containers.py``'s; every wait is a bounded poll.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError

from cluster.errors import NimbusError
from cluster.factory import make_kazoo_client
from cluster.security.client import ClientSecurity
from cluster.security.tls import load_client_tls
from cluster.security.tokens import load_client_token
from nimbus.client import NimbusClient
from tests.containers_cluster import CONTAINERS, NIMBUS, engine_env, podman
from tests.security_helpers import make_server_pki, write_secret
from tests.test_containers import FAILOVER_BOUND_S, SESSION_TIMEOUT, Image, image
from tests.waiting import wait_until

__all__ = ["image"]  # the session's image fixture, shared with tests/test_containers.py

pytestmark = pytest.mark.timeout(600)
SERVER_NAME = "nimbus-replica"


@dataclass
class SecureCluster:
    name: str
    secrets: Path
    stdout: str
    seeds: dict[str, str]  # container -> host-published HOST:PORT
    advertised: dict[str, str]  # container -> advertised address
    zookeeper: str  # host-published HOST:PORT

    def cli(
        self, *args: str, flags: bool = True, token: bool = True
    ) -> subprocess.CompletedProcess[str]:
        given = ["--seeds", ",".join(self.seeds.values())]
        if flags:
            given += ["--tls", "true", "--tls-ca", str(self.secrets / "ca.crt"),
                      "--tls-server-name", SERVER_NAME]  # fmt: skip
        if token:
            given += ["--token-file", str(self.secrets / "token")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("NIMBUS_")}
        return subprocess.run([NIMBUS, *args, *given], capture_output=True, text=True,
                              env=env, timeout=90)  # fmt: skip


def parse_up(stdout: str) -> tuple[dict[str, str], dict[str, str], str]:
    seeds, advertised, zookeeper = {}, {}, ""
    for line in stdout.splitlines():
        fields = line.split()
        if line.startswith("nimbus replica"):
            container = fields[fields.index("(container") + 1].rstrip(",")
            seeds[container] = fields[2]
            advertised[container] = fields[-1].rstrip(")")
        elif line.startswith("zookeeper"):
            zookeeper = fields[1]
    return seeds, advertised, zookeeper


@pytest.fixture(scope="module")
def secure(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    folder = tmp_path_factory.mktemp("secrets")
    make_server_pki(folder, SERVER_NAME)
    write_secret(folder / "token", secrets.token_urlsafe(24) + "\n")
    write_secret(folder / "zk-auth", f"nimbus:{secrets.token_urlsafe(16)}\n")
    write_secret(folder / "tls-server-name", SERVER_NAME + "\n")
    for f in folder.iterdir():  # as an operator keeps them: root's, nobody else's
        os.chown(f, 0, 0)
        f.chmod(0o600)
    name = f"nimbus-sec-{os.getpid()}"
    started = time.monotonic()
    done = subprocess.run(
        [str(CONTAINERS / "up"), "--name", name, "--replicas", "3", "--supervisors", "1",
         "--session-timeout", str(SESSION_TIMEOUT), "--image", image.ref,
         "--secrets", str(folder)],
        capture_output=True, text=True, env=engine_env(), timeout=300,
    )  # fmt: skip
    try:
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        print(f"\n{done.stdout}up --secrets: ready in {time.monotonic() - started:.1f} s")
        assert done.stderr == "", "up says nothing on stderr when all is well"
        seeds, advertised, zookeeper = parse_up(done.stdout)
        yield SecureCluster(name, folder, done.stdout, seeds, advertised, zookeeper)
    finally:
        subprocess.run(
            [str(CONTAINERS / "down"), "--name", name, "--volumes"],
            capture_output=True, env=engine_env(), timeout=120,
        )  # fmt: skip
    left = podman("volume", "ls", "-q", "--filter", f"label=nimbus.up={name}")
    assert left.strip() == "", "down removed the secrets' copy"


def leader_of(cluster: SecureCluster, seeds: list[str]) -> tuple[str, int] | None:
    security = ClientSecurity(
        tls=load_client_tls(
            enabled=True, ca=str(cluster.secrets / "ca.crt"), server_name=SERVER_NAME
        ),
        token=load_client_token(str(cluster.secrets / "token")),
    )
    try:
        with NimbusClient(
            seeds, read_deadline=1.0, per_seed_timeout=0.5, security=security
        ) as client:
            got = client.leader()
        return got.replica_id, got.epoch
    except NimbusError:
        return None


def listed_of(cluster: SecureCluster, count: int) -> list[dict[str, object]]:
    """``nimbus nimbuses`` over TLS with the token, when it lists ``count`` replicas."""
    shown = cluster.cli("nimbuses", "--json")
    listed: list[dict[str, object]] = json.loads(shown.stdout) if shown.returncode == 0 else []
    return listed if len(listed) == count else []


def test_up_with_secrets_serves_tls_with_tokens_and_zookeeper_auth(
    secure: SecureCluster,
) -> None:
    assert f"--tls-server-name {SERVER_NAME}" in secure.stdout, "up prints the client flags"
    # A mutating call without the token is refused before its handler: NOT_FOUND (the
    # handler's answer for a topology nobody submitted) would mean it ran.
    refused = secure.cli("kill", "no-such-topology", token=False)
    assert refused.returncode != 0
    assert "UNAUTHENTICATED" in refused.stderr and "NOT_FOUND" not in refused.stderr
    # With the token and the CA the CLI works: the handler answers, the replicas list.
    reached = secure.cli("kill", "no-such-topology")
    assert "NOT_FOUND" in reached.stderr, reached.stderr
    listed = wait_until(lambda: listed_of(secure, 3), timeout=60, interval=0.5,
                        message="three replicas listed over TLS")  # fmt: skip
    assert sum(bool(n["is_leader"]) for n in listed) == 1
    # A submit is acknowledged only once a follower holds the package: the leader pushed
    # it to a peer over TLS, trusting ca.crt and expecting tls-server-name.
    submitted = secure.cli(
        "submit", str(Path(__file__).parents[1] / "examples" / "wordcount"), "--name", "wc",
        "--config-json",
        json.dumps({"input": "/var/lib/nimbus-data/in", "output": "/var/lib/nimbus-data/out"}),
    )  # fmt: skip
    killed = secure.cli("kill", "wc")
    assert submitted.returncode == 0, submitted.stderr
    assert killed.returncode == 0, killed.stderr


def test_an_anonymous_zookeeper_client_can_neither_read_nor_write(secure: SecureCluster) -> None:
    stranger = make_kazoo_client(secure.zookeeper, session_timeout=10.0)
    stranger.start(timeout=30)
    try:
        assert "storm" in stranger.get_children("/")
        calls: list[Callable[[], object]] = [
            lambda: stranger.get_children("/storm"),
            lambda: stranger.get("/storm"),
            lambda: stranger.create("/storm/stranger", b"x"),
            lambda: stranger.set("/storm", b"x"),
            lambda: stranger.delete("/storm", recursive=True),
        ]
        for call in calls:
            with pytest.raises(NoAuthError):
                call()
    finally:
        stranger.stop()
        stranger.close()


def test_a_killed_leader_is_replaced_with_secrets_on(secure: SecureCluster) -> None:
    seeds = list(secure.seeds.values())
    old = wait_until(lambda: leader_of(secure, seeds), timeout=60, interval=0.5,
                     message="a leader over TLS")  # fmt: skip
    assert old is not None
    container = next(c for c, a in secure.advertised.items() if a == old[0])
    survivors = [s for c, s in secure.seeds.items() if c != container]
    started = time.monotonic()
    podman("kill", container)
    try:

        def replaced() -> tuple[str, int] | None:
            now = leader_of(secure, survivors)
            return now if now and now[0] != old[0] and now[1] > old[1] else None

        new = wait_until(replaced, timeout=60, interval=0.1,
                         message="a new leader after podman kill")  # fmt: skip
        took = time.monotonic() - started
        print(f"\npodman kill of {old} with secrets on: new leader {new} after {took:.2f} s")
    finally:
        podman("start", container)
    # The restarted container reads its secrets again (the copy outlives the container).
    wait_until(lambda: listed_of(secure, 3), timeout=90, interval=0.5,
               message="the killed replica back")  # fmt: skip
    assert took < FAILOVER_BOUND_S


def test_every_replica_publishes_its_metrics_port(secure: SecureCluster) -> None:
    urls = re.findall(r" metrics (http://127\.0\.0\.1:\d+/metrics) ", secure.stdout)
    assert len(urls) == 3, secure.stdout

    def scraped(url: str) -> bytes:
        with urllib.request.urlopen(url, timeout=10) as answer:  # raises until it serves
            return bytes(answer.read())

    for url in urls:
        # The replica the test before killed may still be starting again.
        page = wait_until(lambda: scraped(url), timeout=60, interval=0.5,  # noqa: B023
                          message=f"metrics at {url}")  # fmt: skip
        assert b"# TYPE" in page


def data(cluster: SecureCluster, *args: str) -> str:
    done = subprocess.run(
        [str(CONTAINERS / "data"), *args, "--name", cluster.name],
        capture_output=True, text=True, env=engine_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_data_puts_files_for_the_workers_and_gets_them_back(
    secure: SecureCluster, tmp_path: Path
) -> None:
    feed = tmp_path / "feed"
    (feed / "more").mkdir(parents=True)
    (feed / "a.txt").write_text("alpha beta\n")
    (feed / "more" / "b.txt").write_text("gamma\n")
    single = write_secret(tmp_path / "one.txt", "delta\n")  # root's, mode 600
    data(secure, "put", str(feed), str(single))
    # In the supervisor's container (where workers read), owned by the workers' uid.
    supervisor = f"{secure.name}-supervisor-1"
    shown = podman("exec", "--workdir", "/var/lib/nimbus-data/input", supervisor,
                   "stat", "-c", "%u %n", "a.txt", "more/b.txt", "one.txt")  # fmt: skip
    assert shown.split() == ["10001", "a.txt", "10001", "more/b.txt", "10001", "one.txt"]
    assert not podman("exec", supervisor, "ls", "-A", "/var/lib/nimbus-data").count(".put-")
    # What a worker writes (here: the container's own user) comes back out.
    written = "mkdir -p output && echo 'alpha 1' > output/part-0"
    podman("exec", "--workdir", "/var/lib/nimbus-data", supervisor, "sh", "-c", written)
    out = tmp_path / "out"
    data(secure, "get", "output", str(out))
    assert (out / "output" / "part-0").read_text() == "alpha 1\n"
    data(secure, "get", "input", str(out))
    assert (out / "input" / "more" / "b.txt").read_text() == "gamma\n"
    assert (out / "input" / "one.txt").read_text() == "delta\n"
