"""deploy/: the Kubernetes manifests and the container image, checked offline.

No cluster and no Docker daemon here, so each check takes the part Kubernetes or Docker
would rely on and runs it for real: the manifests against the API schemas, the probes
against a running replica, the pod environment through `nimbus serve`'s own option
parsing, and the image's entry command from a wheel built the way the Dockerfile does.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from leader.health import LEADER_SERVICE
from nimbus.cli import build_parser
from nimbus.cli.cmd_serve import resolve
from nimbus.config import make_config
from nimbus.server.podlabel import LABEL, PodApi, PodLabeler
from tests.cluster import REPO, free_port
from tests.replica_fixtures import Spawn
from tests.waiting import wait_until

KUBE = REPO / "deploy" / "kubernetes"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
# The oldest Kubernetes the manifests promise to fit, and the newest the package knows.
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())


def manifests() -> list[Path]:
    return sorted(p for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")


def resources() -> list[dict[str, Any]]:
    return [doc for path in manifests() for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(kind: str, name: str) -> dict[str, Any]:
    found = [r for r in resources() if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(found) == 1, f"one {kind} {name} in {KUBE}"
    return found[0]


def nimbus_container() -> dict[str, Any]:
    spec = find("StatefulSet", "nimbus")["spec"]["template"]["spec"]
    container: dict[str, Any] = spec["containers"][0]
    return container


def pod_env(container: dict[str, Any], fields: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet makes it: downward-API fields, ConfigMap
    keys, and ``$(VAR)`` expanded from variables defined earlier in the list."""
    config = find("ConfigMap", "nimbus-config")["data"]
    env: dict[str, str] = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"]
            )
        elif "fieldRef" in item["valueFrom"]:
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[item["name"]] = config[item["valueFrom"]["configMapKeyRef"]["key"]]
    return env


def test_every_manifest_validates_against_the_kubernetes_schemas() -> None:
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == [p.name for p in manifests()], "kustomization lists every file"
    kinds = set()
    for path in manifests():
        for doc in yaml.safe_load_all(path.read_text()):
            for version in KUBE_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    pytest.fail(f"{path.name}: {doc['kind']} invalid for {version}: {e.message}")
            kinds.add(doc["kind"])
    expected = {
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "ConfigMap",
        "PersistentVolumeClaim",
    }
    assert expected <= kinds


def test_the_cluster_shape_the_design_asks_for() -> None:
    nimbus = find("StatefulSet", "nimbus")["spec"]
    assert nimbus["replicas"] == 3 and nimbus["podManagementPolicy"] == "Parallel"
    headless = find("Service", nimbus["serviceName"])["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert find("PodDisruptionBudget", "nimbus")["spec"]["maxUnavailable"] == 1
    pod = nimbus["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = nimbus_container()
    assert container["lifecycle"]["preStop"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    leader_only = find("Service", "nimbus-leader")["spec"]["selector"]
    assert leader_only["nimbus-role"] == "leader"


def test_probes_name_health_services_a_running_replica_serves(spawn: Spawn) -> None:
    container = nimbus_container()
    grpc_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
    probes = [container["readinessProbe"], container["livenessProbe"]]
    listen = tomllib.loads(find("ConfigMap", "nimbus-config")["data"]["nimbus.toml"])["listen"]
    assert listen.endswith(f":{grpc_port}")
    services = set()
    for probe in probes:
        assert probe["grpc"]["port"] == grpc_port
        services.add(probe["grpc"].get("service", ""))
    # Readiness per pod: a probe on the leader's name would hold every follower NotReady.
    assert LEADER_SERVICE not in services

    replica = spawn()
    for service in services:
        wait_until(lambda s=service: replica.health(s) == "SERVING", timeout=30,  # type: ignore[misc]
                   message=f"health {service!r} SERVING on a replica")  # fmt: skip


def test_the_advertised_address_is_the_pods_dns_name_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    container = nimbus_container()
    env = pod_env(container, {"metadata.name": "nimbus-1", "metadata.namespace": "prod"})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    toml = tmp_path / "nimbus.toml"
    toml.write_text(find("ConfigMap", "nimbus-config")["data"]["nimbus.toml"])
    args = [str(toml) if a == "/etc/nimbus/nimbus.toml" else a for a in container["args"]]
    values = resolve(build_parser().parse_args(args))
    values.pop("log_level")
    values.pop("log_format")
    config = make_config(**{**values, "code_dir": Path(values["code_dir"])})
    service = find("StatefulSet", "nimbus")["spec"]["serviceName"]
    assert config.replica_id == f"nimbus-1.{service}.prod.svc.cluster.local:6627"
    assert config.zookeeper.startswith("zk-0.zk-headless:2181")
    assert config.metrics_port == 9464 and config.replicas == 3


def project_packages() -> list[str]:
    """The top-level packages pyproject.toml packages (``[tool.setuptools.packages.find]``)."""
    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    names = [p.rstrip("*") for p in found["packages"]["find"]["include"]]
    assert "cluster" in names and "nimbus" in names
    return names


def build_context(dest: Path) -> None:
    """Copy the image's build context as podman and docker send it: the repository minus
    the .dockerignore patterns (top-level names, and ``**/NAME`` at any depth)."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    anywhere = [p.removeprefix("**/") for p in patterns if p.startswith("**/")]
    top = [p for p in patterns if not p.startswith("**/")]

    def ignored(folder: str, names: list[str]) -> set[str]:
        at_top = Path(folder) == REPO
        return {
            n
            for n in names
            if any(fnmatch.fnmatch(n, p) for p in anywhere)
            or (at_top and any(fnmatch.fnmatch(n, p) for p in top))
        }

    shutil.copytree(REPO, dest, ignore=ignored)


def built_wheel(tmp_path: Path) -> Path:
    """Build the wheel the way the Dockerfile's build stage does: from the whole context."""
    assert re.search(r"^COPY \. \.$", DOCKERFILE.read_text(), re.MULTILINE), (
        "the Dockerfile builds from the whole context, so no package can be left out"
    )
    src = tmp_path / "src"
    build_context(src)
    assert not (src / ".venv").exists() and not (src / "tests").exists()
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--wheel-dir", str(wheels), str(src)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = wheels.glob("*.whl")
    return wheel


def test_the_image_entry_command_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert entrypoint is not None and yaml.safe_load(entrypoint.group(1)) == ["nimbus"]
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
         str(site), str(built_wheel(tmp_path))],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # The wheel's code, not the work tree's: run outside the repo with the wheel first.
    env = {**os.environ, "PYTHONPATH": str(site)}
    packages = project_packages()
    where = subprocess.run(
        [sys.executable, "-c",
         f"import importlib; print(*(importlib.import_module(p).__file__ for p in {packages}))"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr[-2000:]
    assert len(where.stdout.split()) == len(packages)
    assert all(p.startswith(str(site)) for p in where.stdout.split())

    def help_of(command: str) -> str:
        shown = subprocess.run(
            [str(site / "bin" / "nimbus"), command, "--help"],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        return " ".join(shown.stdout.split())  # argparse wraps lines anywhere

    serve_help = help_of("serve")
    assert "--metrics-port" in serve_help and "--advertise" in serve_help
    # Every flag and NIMBUS_<FLAG> the manifests use exists in the installed command.
    supervisor = find("StatefulSet", "nimbus-supervisor")["spec"]["template"]["spec"]
    for container, helped in (
        (nimbus_container(), serve_help),
        (supervisor["containers"][0], help_of("supervisor")),
    ):
        assert container["args"][0] in ("serve", "supervisor")
        for arg in container["args"][1:]:
            if arg.startswith("--"):
                assert arg.split("=")[0] in helped, f"{arg} not in `nimbus {container['args'][0]}`"
        for item in container["env"]:
            if item["name"].startswith("NIMBUS_"):
                assert f"env {item['name']}]" in helped, f"{item['name']} is no flag's variable"


def test_pod_labelling_outside_a_pod_is_refused_by_name(zk_hosts: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    done = subprocess.run(
        [
            sys.executable, "-m", "nimbus.cli", "serve", "--zookeeper", zk_hosts,
            "--listen", f"127.0.0.1:{free_port()}", "--k8s-pod", "nimbus-0",
            "--code-dir", str(tmp_path / "code"),
        ],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--k8s-pod 'nimbus-0' needs to run inside a Kubernetes pod" in done.stderr


def test_the_leader_label_is_a_merge_patch_of_the_pods_own_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("t0ken\n")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (account / "namespace").write_text("prod")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    request = PodApi.in_cluster("nimbus-2", account).request("leader")
    assert request.get_method() == "PATCH"
    assert request.full_url == (
        "https://kubernetes.default.svc:443/api/v1/namespaces/prod/pods/nimbus-2"
    )
    assert request.get_header("Content-type") == "application/merge-patch+json"
    assert request.get_header("Authorization") == "Bearer t0ken"
    assert isinstance(request.data, bytes)
    patch = json.loads(request.data)
    # What the leader-only Service selects, and what the Role allows.
    assert patch == {"metadata": {"labels": {LABEL: "leader"}}}
    assert find("Service", "nimbus-leader")["spec"]["selector"][LABEL] == "leader"
    rules = find("Role", "nimbus-pod-labeler")["rules"]
    assert any("pods" in r["resources"] and "patch" in r["verbs"] for r in rules)


def mounted_at(pod: dict[str, Any], container: dict[str, Any], path: str) -> dict[str, Any]:
    """The pod volume a container mounts at ``path`` (or above it)."""
    mounts = [m for m in container["volumeMounts"] if (path + "/").startswith(m["mountPath"] + "/")]
    assert mounts, f"nothing mounted at {path}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume: dict[str, Any] = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    return volume


def claim_templates(workload: dict[str, Any]) -> set[str]:
    return {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}


def test_supervisor_state_and_pipeline_data_outlive_a_replaced_pod() -> None:
    workload = find("StatefulSet", "nimbus-supervisor")
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = dict(a.split("=", 1) for a in container["args"][1:] if "=" in a)
    # Its state on its own claim, kept across a replaced pod: no emptyDir anywhere.
    state = args["--state-dir"]
    names = {m["name"] for m in container["volumeMounts"] if m["mountPath"] == state}
    assert names and names <= claim_templates(workload)
    assert not any("emptyDir" in v for v in pod["volumes"])
    # Its id is the pod's name, which a StatefulSet keeps: a rollout moves no slot.
    env = pod_env(container, {"metadata.name": "nimbus-supervisor-1", "status.podIP": "10.0.0.9"})
    assert env["NIMBUS_ID"] == "nimbus-supervisor-1"
    # Checkpoints (and pipeline data) on one claim every supervisor mounts read-write.
    shared = mounted_at(pod, container, args["--checkpoint-dir"])
    claim = find("PersistentVolumeClaim", shared["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_token_secret_reaches_replicas_supervisors_and_the_cli() -> None:
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    (generated,) = [g for g in kustomization["secretGenerator"] if g["name"] == "nimbus-token"]
    (token_file,) = generated["files"]
    # The operator makes the token; it is never committed.
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(KUBE / token_file)], cwd=REPO, timeout=30
    )
    assert ignored.returncode == 0, f"deploy/kubernetes/{token_file} is not git-ignored"
    supervisor = find("StatefulSet", "nimbus-supervisor")["spec"]["template"]["spec"]
    replica = find("StatefulSet", "nimbus")["spec"]["template"]["spec"]
    for pod in (replica, supervisor):
        container = pod["containers"][0]
        path = next(e["value"] for e in container["env"] if e["name"] == "NIMBUS_TOKEN_FILE")
        volume = mounted_at(pod, container, path)
        assert volume["secret"]["secretName"] == "nimbus-token"
        assert path.rsplit("/", 1)[1] == token_file


def test_the_web_ui_has_a_service_on_the_port_replicas_serve_it() -> None:
    config = tomllib.loads(find("ConfigMap", "nimbus-config")["data"]["nimbus.toml"])
    ports = {p["name"]: p["containerPort"] for p in nimbus_container()["ports"]}
    service = find("Service", "nimbus-ui")["spec"]
    assert service["selector"] == find("StatefulSet", "nimbus")["spec"]["selector"]["matchLabels"]
    (port,) = service["ports"]
    assert ports[port["targetPort"]] == config["ui-port"]


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**20


def test_a_replicas_memory_limit_leaves_room_over_the_validation_limit() -> None:
    config = tomllib.loads(find("ConfigMap", "nimbus-config")["data"]["nimbus.toml"])
    limit = mebibytes(nimbus_container()["resources"]["limits"]["memory"])
    # The replica itself needs a few hundred MiB beside a validation child at its limit.
    assert limit - config["validate-memory-mib"] >= 512, (limit, config["validate-memory-mib"])


def test_the_pod_label_follows_the_claim_not_only_the_term(tmp_path: Path) -> None:
    """A leader whose claim lapsed (no fresh acknowledged beat: cut off from ZooKeeper)
    asks for the follower label within one beat interval, and for the leader label again
    once it claims; nothing is patched here (the labeler's thread is not started)."""
    api = PodApi(
        "https://kubernetes.invalid:443", "prod", "nimbus-0", tmp_path / "t", tmp_path / "c"
    )
    labeler = PodLabeler(api)
    claims = threading.Event()
    claims.set()
    stop = threading.Event()
    thread = labeler.follow_claim(claims.is_set, stop, 0.01)
    try:
        wait_until(lambda: labeler.wanted == "leader", timeout=5, message="the leader label")
        claims.clear()  # the claim lease lapsed
        wait_until(lambda: labeler.wanted == "follower", timeout=5, message="dropped")
        claims.set()
        wait_until(lambda: labeler.wanted == "leader", timeout=5, message="claimed again")
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
