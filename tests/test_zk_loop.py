"""kazoo's connection loop dying is noticed: the process exits loudly to be restarted,
instead of serving on without ZooKeeper forever (it never reconnects by itself)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cluster.factory import make_kazoo_client
from cluster.zkloop import EXIT_ZK_LOOP_DIED, loop_died, watch_connection_loop
from tests.cluster import REPO, Replica, wait_for_agreed_leader
from tests.replica_fixtures import ROOT
from tests.waiting import wait_until


class LoopDyingReplica(Replica):
    """A real ``nimbus serve`` whose kazoo loop raises once ``trigger`` exists."""

    def __init__(self, zookeeper: str, workdir: Path, trigger: Path) -> None:
        super().__init__(zookeeper, ROOT, workdir)
        self.trigger = trigger

    def start(self) -> Replica:
        cmd = [
            sys.executable, "-m", "tests.procs.zk_loop_dies", "serve",
            "--zookeeper", self.zookeeper, "--root", self.root,
            "--listen", self.address, "--session-timeout", str(self.session_timeout),
            "--code-dir", str(self.code_dir),
        ]  # fmt: skip
        env = {**os.environ, "NIMBUS_TEST_LOOP_TRIGGER": str(self.trigger)}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env
            )
        return self


@pytest.mark.timeout(120)
def test_a_replica_whose_kazoo_loop_dies_exits_loudly(zk_hosts: str, tmp_path: Path) -> None:
    trigger = tmp_path / "die"
    replica = LoopDyingReplica(zk_hosts, tmp_path, trigger).start()
    try:
        wait_for_agreed_leader([replica], timeout=30)
        trigger.touch()
        assert replica.proc is not None
        code = wait_until(replica.proc.poll, timeout=15, interval=0.1,
                          message="the replica exiting after its kazoo loop died")  # fmt: skip
        assert code == EXIT_ZK_LOOP_DIED
        log = replica.log_path.read_text(errors="replace")
        assert "Unhandled exception in connection loop" in log
        assert "connection loop died" in log and "exiting with status 70" in log
    finally:
        replica.stop()


def test_the_watch_sees_a_dead_loop_and_not_a_stopped_client(zk_hosts: str) -> None:
    dead: list[str] = []
    seen = threading.Event()

    def on_death(name: str) -> None:
        dead.append(name)
        seen.set()

    stopped = make_kazoo_client(zk_hosts, session_timeout=2.0)
    stopped.start(timeout=10)
    watcher = watch_connection_loop(stopped, "stopped", on_death=on_death, interval=0.05)
    stopped.stop()
    stopped.close()
    watcher.join(5)
    assert not watcher.is_alive() and not dead, "a client stopped on purpose is not a death"

    client = make_kazoo_client(zk_hosts, session_timeout=2.0)
    client.start(timeout=10)
    try:
        watch_connection_loop(client, "dying", on_death=on_death, interval=0.05)
        assert not loop_died(client)

        def boom(connect_timeout: object) -> None:
            raise RuntimeError("injected")

        client._connection._send_ping = boom  # the loop's next idle ping raises
        assert seen.wait(15), "the dead loop was not noticed"
        assert dead == ["dying"] and loop_died(client)
    finally:
        client.stop()
        client.close()
