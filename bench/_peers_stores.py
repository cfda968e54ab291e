"""The stores bench/peers.py runs its candidates against (one etcd; ZooKeeper comes from
devtools), Curator's jars and the compiled latch, and the bench's log line.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from _common import REPO, BenchError, free_port, pdeathsig_prefix

START_TIMEOUT_S = 90.0
CURATOR_JARS = (
    "curator-client-",
    "curator-framework-",
    "curator-recipes-",
    "zookeeper-3",
    "zookeeper-jute-",
    "guava-",
    "failureaccess-",
    "slf4j-api-",
    "log4j-api-",
    "log4j-core-",
    "log4j-slf4j2-impl-",
    "netty-",  # ZooKeeper's client names netty's SSL classes even on its NIO socket
)


def log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the stores -------------------------------------------------------------------------


def run_quiet(argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


def ensure_etcd() -> None:
    """Debian's etcd 3.4 (``etcd-server``, ``etcd-client``), installed when missing."""
    if shutil.which("etcd") and shutil.which("etcdctl"):
        return
    log("etcd missing: apt-get install -y etcd-server etcd-client")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "etcd-server", "etcd-client"]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise BenchError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    if not (shutil.which("etcd") and shutil.which("etcdctl")):
        raise BenchError("etcd-server / etcd-client installed, but no etcd or etcdctl on PATH")


def first_line(argv: Sequence[str]) -> str:
    try:
        done = run_quiet(argv)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


class Etcd:
    """One etcd member on loopback, its data in a temp folder."""

    def __init__(self, workdir: Path) -> None:
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = workdir / "etcd-data"
        self.log_path = workdir / "etcd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self) -> Etcd:
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://{self.endpoint}"
        cmd = [
            *pdeathsig_prefix(), "etcd", "--name", "peers", "--data-dir", str(self.data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"peers={peer}", "--logger", "zap", "--log-level", "warn",
        ]  # fmt: skip
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"etcd exited with {self.proc.returncode}: {tail(self.log_path)}")
            if self.ctl("endpoint", "health").returncode == 0:
                return self
            time.sleep(0.2)
        raise BenchError(f"etcd not healthy in {START_TIMEOUT_S:.0f} s: {tail(self.log_path)}")

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_quiet(["etcdctl", "--endpoints", self.endpoint, *args])

    def keys(self, prefix: str) -> list[str]:
        done = self.ctl("get", "--prefix", prefix, "--keys-only")
        return [k for k in done.stdout.split() if k] if done.returncode == 0 else []

    def put(self, key: str, value: bytes, timeout: float = 30.0) -> None:
        """One put through etcd's JSON gateway (no etcdctl process start in the time)."""
        body = json.dumps(
            {
                "key": base64.b64encode(key.encode()).decode(),
                "value": base64.b64encode(value).decode(),
            }
        ).encode()
        request = urllib.request.Request(
            f"http://{self.endpoint}/v3/kv/put",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no *_proxy
        with direct.open(request, timeout=timeout) as response:
            answer = json.loads(response.read() or b"{}")
        if "header" not in answer:
            raise BenchError(f"etcd put {key}: unexpected answer {answer}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise BenchError("pyspark is not installed: its wheel's jars hold Curator")
    return Path(spec.origin).parent / "jars"


def curator_classpath(jars_dir: Path) -> list[Path]:
    jars = sorted(jars_dir.glob("*.jar"))
    picked = [j for j in jars if j.name.startswith(CURATOR_JARS)]
    for prefix in ("curator-recipes-", "zookeeper-3"):
        if not any(j.name.startswith(prefix) for j in picked):
            raise BenchError(f"no {prefix}*.jar in {jars_dir}")
    return picked


def compile_latch(workdir: Path) -> str:
    """Compile PeersLatch.java into ``workdir/classes``; the classpath to run it with."""
    jars = curator_classpath(pyspark_jars())
    classes = workdir / "classes"
    classes.mkdir()
    source = REPO / "bench" / "peers_java" / "PeersLatch.java"
    cp = ":".join(str(j) for j in jars)
    done = run_quiet(["javac", "-d", str(classes), "-cp", cp, str(source)], timeout=300)
    if done.returncode != 0:
        raise BenchError(f"javac failed: {done.stderr.strip()}")
    return f"{cp}:{classes}"
