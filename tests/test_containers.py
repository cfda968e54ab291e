"""The system as containers of its own image, with a real container engine (podman).

The image is built the way a user builds it (``deploy/containers/build-image``, which
installs podman and makes a local base image where no registry answers); a cluster is
started the way a user starts one (``deploy/containers/up``: ZooKeeper, three replicas
and a supervisor, configured by ``NIMBUS_*`` variables); clients run on the host with
the project's CLI. Faults are the engine's own: ``podman kill`` (SIGKILL, the container
and its network namespace gone), ``podman pause`` (the cgroup frozen: a hung process)
and ``podman network disconnect`` (a partition). The Kubernetes manifests are then
played with ``podman kube play``, their readiness probes run as the manifests state them.

Every wait is a bounded poll on a condition. Without podman (and no root to install it)
the module skips; ``./run-tests`` installs it first (deploy/local/containers.sh), so CI
runs every test here.
"""

from __future__ import annotations

import base64
import copy
import fnmatch
import functools
import json
import os
import secrets
import shutil
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import REPO
from tests.containers_cluster import (
    CONTAINERS,
    NIMBUS,
    Cluster,
    engine_env,
    fail_over,
    nimbuses,
    one_leader_of_three,
    podman,
    up_cluster,
)
from tests.test_deploy import find, nimbus_container, pod_env
from tests.tiers import needs
from tests.waiting import wait_until

#: Short sessions for the rows that wait for one (a paused or cut-off leader).
SESSION_TIMEOUT = 4.0
#: "A new leader within 2 s" is the design's figure; the bound leaves room for a loaded
#: 2-core CI machine. The measured figure is printed (pytest -s, or the durations).
FAILOVER_BOUND_S = 5.0

pytestmark = pytest.mark.timeout(600)


@dataclass
class Image:
    ref: str
    build_s: float


@pytest.fixture(scope="session")
@needs("containers")
def image() -> Image:
    """The project's image, built by deploy/containers/build-image (cold or warm)."""
    if shutil.which("podman") is None:
        subprocess.run([str(REPO / "deploy" / "local" / "containers.sh")], check=False)
        if shutil.which("podman") is None:
            pytest.skip("no podman (as root: deploy/local/containers.sh)")
    started = time.monotonic()
    done = subprocess.run(
        [str(CONTAINERS / "build-image")],
        capture_output=True, text=True, env={**engine_env(), "NIMBUS_ENGINE": "podman"},
        timeout=900,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    ref = done.stdout.strip().splitlines()[-1]
    print(f"\nbuild-image: {ref} in {took:.1f} s")
    return Image(ref, took)


def test_the_image_is_built_runs_as_uid_10001_and_holds_java(image: Image) -> None:
    config = json.loads(podman("image", "inspect", image.ref))[0]
    assert config["Config"]["Entrypoint"] == ["nimbus"]
    assert config["Config"]["User"].split(":")[0] == "10001"
    size_gb = config["Size"] / 1e9
    print(f"\nimage {image.ref}: {size_gb:.2f} GB, build-image {image.build_s:.1f} s")
    started = time.monotonic()
    shown = podman(
        "run", "--rm", "--entrypoint", "sh", image.ref, "-c", "id -u; java -version 2>&1"
    )
    print(f"container start to exit: {time.monotonic() - started:.2f} s")
    uid, java = shown.split("\n", 1)
    assert uid == "10001"
    assert 'version "17' in java
    # Each role the manifests and deploy/containers/up start answers in the image.
    for role in ("serve", "supervisor", "zookeeper"):
        helped = podman("run", "--rm", image.ref, role, "--help")
        assert "[env NIMBUS_ZOOKEEPER]" in helped or role == "zookeeper"


def test_every_package_of_the_project_imports_inside_the_image(image: Image) -> None:
    """Whatever pyproject.toml packages is in the image: a package the build left out (the
    old Dockerfile copied a list of folders and missed cluster/) fails this."""
    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = found["packages"]["find"]["include"]
    tops = [d for d in REPO.iterdir() if any(fnmatch.fnmatch(d.name, p) for p in patterns)]
    inits = [i.parent.relative_to(REPO) for t in tops for i in t.rglob("__init__.py")]
    names = {".".join(i.parts) for i in inits}
    packages = sorted(n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns))
    assert {"cluster", "nimbus", "leader", "fencing", "code_sync", "pipeline"} <= set(packages)
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {packages!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {e!r}')\n"
        "print('\\n'.join(failed) or 'ok')\n"
    )
    shown = podman(
        "run", "--rm", "--workdir", "/", "--entrypoint", "python3", image.ref, "-c", script
    )
    assert shown.strip() == "ok", shown


@pytest.fixture(scope="module")
def cluster(image: Image) -> Iterator[Cluster]:
    """deploy/containers/up: ZooKeeper, three replicas, one supervisor (module-wide)."""
    name = f"nimbus-test-{os.getpid()}"
    with up_cluster(name, image.ref, replicas=3, supervisors=1,
                    session_timeout=SESSION_TIMEOUT) as up:  # fmt: skip
        print(f"\n{up.shown}up: ready in {up.up_s:.1f} s")
        yield up


def test_three_replicas_in_containers_elect_one_leader(cluster: Cluster) -> None:
    leader = wait_until(lambda: one_leader_of_three(cluster), timeout=30, interval=0.5,
                        message="nimbuses: three replicas, one leader")  # fmt: skip
    assert leader in cluster.advertised.values()
    summary = subprocess.run(
        [NIMBUS, "cluster", "--json", "--seeds", ",".join(cluster.seeds.values())],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert summary.returncode == 0, summary.stderr
    assert "supervisor-1" in summary.stdout, "the supervisor container registered"


def test_a_killed_leader_container_is_replaced(cluster: Cluster) -> None:
    took = fail_over(
        cluster, lambda c: podman("kill", c), lambda c: podman("start", c), "podman kill"
    ).took_s
    assert took < FAILOVER_BOUND_S, f"a new leader {took:.2f} s after the kill"


def test_a_paused_leader_container_is_replaced(cluster: Cluster) -> None:
    took = fail_over(
        cluster, lambda c: podman("pause", c), lambda c: podman("unpause", c), "podman pause"
    ).took_s
    assert took < SESSION_TIMEOUT + FAILOVER_BOUND_S


def test_a_leader_cut_off_the_network_is_replaced(cluster: Cluster) -> None:
    took = fail_over(cluster, cut(cluster), rejoin(cluster), "podman network disconnect").took_s
    assert took < SESSION_TIMEOUT + FAILOVER_BOUND_S


# -- the Kubernetes manifests under `podman kube play` -------------------------------------

#: A kubelet's gRPC readiness probe, asked from inside the pod (the image has grpcio).
GRPC_PROBE = """import sys, grpc
from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g
port, service = sys.argv[1], sys.argv[2]
with grpc.insecure_channel('127.0.0.1:' + port) as channel:
    got = g.HealthStub(channel).Check(h.HealthCheckRequest(service=service), timeout=1)
sys.exit(0 if got.status == h.HealthCheckResponse.SERVING else 1)"""
TCP_PROBE = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)"


def probe_command(container: dict[str, object], probe: dict[str, Any]) -> list[str]:
    """The command that asks what ``probe`` (a manifest's probe) asks, run in the pod."""
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}  # type: ignore[attr-defined]

    def port_of(spec: dict[str, Any]) -> str:
        return str(ports.get(spec["port"], spec["port"]))

    if "grpc" in probe:
        spec = probe["grpc"]
        return ["python3", "-c", GRPC_PROBE, port_of(spec), spec.get("service", "")]
    if "tcpSocket" in probe:
        return ["python3", "-c", TCP_PROBE, port_of(probe["tcpSocket"])]
    if "exec" in probe:
        return list(probe["exec"]["command"])
    raise AssertionError(f"no runner for probe {probe}")


@dataclass
class Played:
    yaml: str
    replicas: dict[str, str]  # container name -> pod IP
    zookeeper: str  # container name
    zookeeper_ip: str
    volumes: list[str]  # what podman makes of claims, configMaps and emptyDirs


def render_for_podman(image: str, prefix: str, token: str, replicas: int = 3) -> Played:
    """deploy/kubernetes as Pods ``podman kube play`` runs: the nimbus StatefulSet's pod
    template once per ordinal (podman has no StatefulSet), with what the kubelet and the
    cluster would supply made explicit: the environment expanded (downward API, ConfigMap
    keys, ``$(VAR)``), the volume claim templates as claims, the token Secret, and the
    headless Service's DNS names as host aliases of fixed pod addresses. The image is the
    one just built. ZooKeeper: the manifests' official image is out of reach without a
    registry, so ZooKeeper runs from the project's image (``IMAGE zookeeper``) in a pod
    with the manifest's ports and readiness probe; the replicas reach it through the
    ConfigMap's ``zookeeper`` key, as they would an ensemble of one's own."""
    zk_ip, namespace = f"{prefix}.20", "default"
    docs: list[dict[str, Any]] = []
    config = copy.deepcopy(find("ConfigMap", "nimbus-config"))
    config["data"]["zookeeper"] = f"{zk_ip}:2181"
    docs.append(config)
    docs.append({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nimbus-token"},
        # podman 4.3 reads only data (it crashes on stringData); it mounts the values
        # still base64-encoded, which only makes the token longer here.
        "type": "Opaque", "data": {"token": base64.b64encode(token.encode()).decode()},
    })  # fmt: skip
    zk_template = find("StatefulSet", "zk")["spec"]["template"]
    zk_container = zk_template["spec"]["containers"][0]
    docs.append({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "zk-0", "labels": zk_template["metadata"]["labels"]},
        "spec": {"containers": [{
            "name": "zookeeper", "image": image, "args": ["zookeeper"],
            "env": [{"name": "NIMBUS_PORT", "value": "2181"},
                    {"name": "NIMBUS_LISTEN_HOST", "value": "0.0.0.0"}],
            "readinessProbe": zk_container["readinessProbe"],
        }]},
    })  # fmt: skip
    workload = find("StatefulSet", "nimbus")
    service = workload["spec"]["serviceName"]
    ips = {f"nimbus-{i}": f"{prefix}.{21 + i}" for i in range(replicas)}
    aliases = [
        {"ip": ip, "hostnames": [f"{pod}.{service}.{namespace}.svc.cluster.local"]}
        for pod, ip in ips.items()
    ]
    for pod in ips:
        template = copy.deepcopy(workload["spec"]["template"])
        spec = template["spec"]
        container = spec["containers"][0]
        fields = {"metadata.name": pod, "metadata.namespace": namespace}
        env = pod_env(container, fields)
        env["NIMBUS_ZOOKEEPER"] = config["data"]["zookeeper"]
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
        container["image"] = image
        del container["ports"]  # podman 4.3 publishes every containerPort on the host
        for claim in workload["spec"]["volumeClaimTemplates"]:
            name = f"{claim['metadata']['name']}-{pod}"
            docs.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": name}, "spec": claim["spec"]})  # fmt: skip
            spec["volumes"].append(
                {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": name}}
            )
        for volume in spec["volumes"]:
            if "secret" in volume:  # podman 4.3 dereferences "optional" unchecked
                volume["secret"].setdefault("optional", False)
        spec["hostAliases"] = aliases
        spec["hostname"] = pod
        docs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": pod, "labels": template["metadata"]["labels"]},
                     "spec": spec})  # fmt: skip
    template_volumes = workload["spec"]["template"]["spec"]["volumes"]
    return Played(
        yaml=yaml.safe_dump_all(docs, sort_keys=False),
        replicas={f"{pod}-nimbus": ip for pod, ip in ips.items()},
        zookeeper="zk-0-zookeeper",
        zookeeper_ip=zk_ip,
        volumes=[
            *(d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"),
            config["metadata"]["name"],
            *(v["name"] for v in template_volumes if "emptyDir" in v),
        ],
    )


def test_the_manifests_run_under_podman_kube_play(image: Image, tmp_path: Path) -> None:
    network = f"nimbus-kube-{os.getpid()}"
    podman("network", "create", network)
    subnet = podman("network", "inspect", network, "--format",
                    "{{range .Subnets}}{{.Subnet}}{{end}}").strip()  # fmt: skip
    token = secrets.token_urlsafe(24)
    played = render_for_podman(image.ref, subnet.rsplit(".", 1)[0], token)
    manifest = tmp_path / "kube.yaml"
    manifest.write_text(played.yaml)
    ips = [
        "--ip",
        played.zookeeper_ip,
        *(a for ip in played.replicas.values() for a in ("--ip", ip)),
    ]
    started = time.monotonic()
    try:
        podman("kube", "play", "--network", network, *ips, str(manifest))

        def ready(container: str, command: list[str]) -> bool:
            done = subprocess.run(["podman", "exec", container, *command], capture_output=True,
                                  env=engine_env(), timeout=30)  # fmt: skip
            return done.returncode == 0

        # Each readiness probe as its manifest states it, run in its container.
        zk = find("StatefulSet", "zk")["spec"]["template"]["spec"]["containers"][0]
        zk_probe = probe_command(zk, zk["readinessProbe"])
        wait_until(lambda: ready(played.zookeeper, zk_probe), timeout=60, interval=0.3,
                   message="ZooKeeper's readiness probe")  # fmt: skip
        replica = nimbus_container()
        probes = [probe_command(replica, replica[p]) for p in ("readinessProbe", "livenessProbe")]
        for container in played.replicas:
            for probe in probes:
                wait_until(
                    functools.partial(ready, container, probe), timeout=90, interval=0.3,
                    message=f"{container}'s probe {probe}",
                )  # fmt: skip
        took = time.monotonic() - started
        print(f"\nkube play to every probe passing: {took:.1f} s")
        # A probe can fail: the same command against a port nothing serves.
        assert not ready(next(iter(played.replicas)), [*probes[0][:3], "6699", ""])

        seeds = [f"{ip}:6627" for ip in played.replicas.values()]

        def one_leader() -> list[dict[str, object]]:
            listed = nimbuses(seeds)
            return listed if sum(bool(r["is_leader"]) for r in listed) == 1 else []

        listed = wait_until(one_leader, timeout=30, interval=0.5,
                            message="one leader among the played replicas")  # fmt: skip
        service = find("StatefulSet", "nimbus")["spec"]["serviceName"]
        assert sorted(str(r["address"]) for r in listed) == [
            f"nimbus-{i}.{service}.default.svc.cluster.local:6627" for i in range(3)
        ]

        # The token Secret is wired in: the CLI in a replica's pod (kubectl exec ... nimbus)
        # sends the mounted token, and a mutating call without it is refused.
        def kill(*env: str) -> str:
            done = subprocess.run(
                ["podman", "exec", next(iter(played.replicas)), "env", *env,
                 "nimbus", "kill", "no-such-topology", "--seeds", "127.0.0.1:6627"],
                capture_output=True, text=True, env=engine_env(), timeout=60,
            )  # fmt: skip
            return done.stderr

        assert "NOT_FOUND" in kill()
        assert "UNAUTHENTICATED" in kill("-u", "NIMBUS_TOKEN_FILE")
    finally:
        subprocess.run(["podman", "kube", "down", str(manifest)], capture_output=True,
                       env=engine_env(), timeout=120)  # fmt: skip
        for pod in ("zk-0", *(c.rsplit("-", 1)[0] for c in played.replicas)):
            podman("pod", "rm", "-f", "-t", "5", pod, check=False)
        podman("volume", "rm", "-f", *played.volumes, "nimbus-token", check=False)
        podman("secret", "rm", "nimbus-token", check=False)
        podman("network", "rm", "-f", network, check=False)


def cut(cluster: Cluster) -> Callable[[str], object]:
    return lambda container: podman("network", "disconnect", cluster.name, container)


def rejoin(cluster: Cluster) -> Callable[[str], object]:
    """Reconnect a container at its old address: the one it advertises."""
    return lambda container: podman(
        "network", "connect", "--ip", cluster.advertised[container].split(":")[0],
        cluster.name, container,
    )  # fmt: skip


@pytest.mark.soak  # a Spark worker in a container: minutes, and ~2 GB of memory
def test_word_count_in_a_supervisor_container_stays_exact_across_leader_faults(
    cluster: Cluster,
) -> None:
    """The README's word count, submitted from the host with the CLI, run by the
    supervisor container's Spark worker on the shared pipeline-data volume: its counts
    are exact, and stay exact for text fed while the leader's container is killed, paused
    and cut off the network in turn, each followed by a new leader."""
    from devtools.cmd_dev import MORE_TEXT, _count_words, _output_counts

    volume = f"{cluster.name}-data"
    data = Path(podman("volume", "inspect", volume, "--format", "{{.Mountpoint}}").strip())
    inbox, out = data / "input", data / "output"
    inbox.mkdir()
    example = REPO / "examples" / "wordcount"
    for part in sorted((example / "corpus").iterdir()):
        shutil.copy(part, inbox / part.name)
    seeds = ",".join(cluster.seeds.values())
    config = {"input": "/var/lib/nimbus-data/input", "output": "/var/lib/nimbus-data/output"}
    submitted = subprocess.run(
        [NIMBUS, "submit", str(example), "--name", "wordcount", "--seeds", seeds,
         "--config-json", json.dumps({**config, "parallelism": 2})],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    expected = _count_words(inbox)
    wait_until(lambda: _output_counts(out) == expected, timeout=300, interval=1,
               message="exact counts from the supervisor container")  # fmt: skip

    def feed(name: str) -> None:
        staging = data / f".{name}"
        staging.write_text(MORE_TEXT)
        staging.rename(inbox / name)  # whole files only: the spout never sees half one
        wanted = _count_words(inbox)
        wait_until(lambda: _output_counts(out) == wanted, timeout=180, interval=1,
                   message=f"{name} counted exactly")  # fmt: skip

    try:
        for what, fault, heal in (
            ("kill", lambda c: podman("kill", c), lambda c: podman("start", c)),
            ("pause", lambda c: podman("pause", c), lambda c: podman("unpause", c)),
            ("disconnect", cut(cluster), rejoin(cluster)),
        ):
            fail_over(cluster, fault, heal, f"podman {what}", lambda w=what: feed(f"{w}.txt"))  # type: ignore[misc]
    finally:
        subprocess.run([NIMBUS, "kill", "wordcount", "--seeds", seeds],
                       capture_output=True, timeout=120)  # fmt: skip
