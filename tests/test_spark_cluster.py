"""Word count on a real Spark standalone cluster: a master and one worker from PySpark's jars.

The master and worker are the wheel's own ``bin/spark-class`` daemons, each a JVM that
dies with this process (``PR_SET_PDEATHSIG``) and is stopped in teardown. The topology
runs in a process of its own (``tests/procs/run_topology.py``, a worker's path without
ZooKeeper) because a SparkSession is per process and the rest of the suite shares a local
one in this process. The counts must equal a plain-Python count, and the job must have run
on the cluster: the master lists the application as finished and the worker's work folder
holds its executor's log with finished tasks. Measured here: 150-220 s on 2 cores with
load 15 from other suites (about 30 CPU-seconds in all: three JVMs, then the driver's).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

from code_sync.package import make_package
from tests.test_pipeline import CORPUS, EXAMPLE, corpus_copy, python_count, sink_counts
from tests.tiers import needs
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: JVM start-up is slow on 2 busy cores (a minute each was seen with other suites running).
START_TIMEOUT = 300.0
RUN_TIMEOUT = 600.0
STOP_TIMEOUT = 30.0
POLL = 0.2

MASTER_URL_RE = re.compile(r"Starting Spark master at (spark://\S+)")
MASTER_UI_RE = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")


def _pdeathsig() -> list[str]:
    """A command prefix: SIGKILL the child when the thread that forked it dies (Linux).

    ``setpriv`` (same pid, no Python in the forked child: a ``preexec_fn`` in a process
    with gRPC threads was seen to abort the child). pytest runs fixtures and tests in the
    main thread, so that is when this process ends.
    """
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def alive_or_fail(self) -> None:
        """Fail at once (not at a deadline) when the JVM is gone; BaseException passes
        through ``wait_until``."""
        if self.proc.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM the process group (the JVM and anything it started), then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


@dataclass
class StandaloneCluster:
    master_url: str
    ui_port: int
    work_dir: Path
    master: Daemon
    worker: Daemon

    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            status: dict[str, Any] = json.load(answer)
        return status

    def logs(self) -> str:
        return f"master:\n{self.master.tail()}\nworker:\n{self.worker.tail()}"


def _spawn(name: str, args: list[str], folder: Path, env: dict[str, str]) -> Daemon:
    log = folder / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*_pdeathsig(), str(SPARK_CLASS), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env=env,
            start_new_session=True,  # a group of its own: teardown stops it whole
        )
    return Daemon(name, proc, log)


def _wait(what: str, cluster_logs: Callable[[], str], predicate: Callable[[], Any]) -> Any:
    try:
        return wait_until(predicate, timeout=START_TIMEOUT, interval=POLL, message=what)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster_logs()}") from None


@pytest.fixture(scope="module")
@needs("spark")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    folder = tmp_path_factory.mktemp("spark-standalone")
    conf = folder / "conf"  # empty: no spark-defaults.conf or spark-env.sh from elsewhere
    conf.mkdir()
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # No REST submission server: it would take port 6066, shared by every test run.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        # Less JIT and GC work while the daemons start on two busy cores.
        "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    daemons: list[Daemon] = []
    try:
        master = _spawn(
            "master",
            [MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
            folder,
            env,
        )
        daemons.append(master)

        def master_bound() -> tuple[str, int] | None:
            master.alive_or_fail()
            text = master.text()
            url, ui = MASTER_URL_RE.search(text), MASTER_UI_RE.search(text)
            return (url.group(1), int(ui.group(1))) if url and ui else None

        master_url, ui_port = _wait("the master's URL and web UI port", master.tail, master_bound)
        work_dir = folder / "work"
        worker_args = [WORKER_CLASS, master_url, "--host", "127.0.0.1", "--cores", "1"]
        worker_args += ["--memory", "1g", "--webui-port", "0", "--work-dir", str(work_dir)]
        worker = _spawn("worker", worker_args, folder, env)
        daemons.append(worker)
        cluster = StandaloneCluster(master_url, ui_port, work_dir, master, worker)

        def worker_registered() -> bool:
            master.alive_or_fail()
            worker.alive_or_fail()
            workers = cluster.status()["workers"]
            return any(w["state"] == "ALIVE" and w["memoryfree"] >= 1024 for w in workers)

        _wait("the worker to register with the master", cluster.logs, worker_registered)
        yield cluster
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


@pytest.mark.timeout(START_TIMEOUT * 2 + RUN_TIMEOUT + 120)
def test_word_count_runs_on_a_standalone_cluster(
    standalone: StandaloneCluster, tmp_path: Path
) -> None:
    inp, out = corpus_copy(tmp_path)
    package = make_package(
        {
            p.relative_to(EXAMPLE).as_posix(): p.read_bytes()
            for p in EXAMPLE.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        },
        tmp_path / "wordcount.zip",
    )
    env = {
        **os.environ,
        "WORDCOUNT_INPUT": str(inp),
        "WORDCOUNT_OUTPUT": str(out),
        "SPARK_LOCAL_IP": "127.0.0.1",  # the driver, so the executor can reach it
        "PYSPARK_PYTHON": sys.executable,  # the executor's Python workers: this venv
    }
    app_name = f"wordcount-{tmp_path.name}"
    cmd = [
        *_pdeathsig(),
        sys.executable,
        "-m",
        "tests.procs.run_topology",
        "--package",
        str(package),
    ]
    cmd += ["--spark-master", standalone.master_url, "--checkpoint-dir", str(tmp_path / "ck")]
    cmd += ["--app-name", app_name, "--timeout", str(RUN_TIMEOUT)]
    done = subprocess.run(
        cmd,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT + 120,
    )
    assert done.returncode == 0, (
        f"runner exited {done.returncode}:\n{done.stderr[-4000:]}\n{standalone.logs()}"
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["master"] == standalone.master_url

    assert sink_counts(out) == python_count(p.read_text() for p in CORPUS)

    # It ran on the cluster: the master finished the application ...
    def finished() -> dict[str, Any] | None:
        apps = standalone.status()["completedapps"]
        return next((a for a in apps if a["id"] == report["app_id"]), None)

    app = _wait("the master to list the application as completed", standalone.logs, finished)
    assert app["name"] == app_name
    assert app["state"] == "FINISHED"
    # ... and the worker's executor ran its tasks (its log is in the worker's work folder).
    executor_logs = list((standalone.work_dir / report["app_id"]).glob("*/stderr"))
    assert executor_logs, f"no executor folder for {report['app_id']} in {standalone.work_dir}"
    assert any("Finished task" in log.read_text(errors="replace") for log in executor_logs)
