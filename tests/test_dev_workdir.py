"""``nimbus dev`` (what ``./nimbus-dev`` runs) without --workdir: its first listing shows
every replica it started, and the temporary ``nimbus-dev-*`` folder it made is gone once
it stops. Real ZooKeeper, real replica processes."""

from __future__ import annotations

import queue
import re
import signal
import time
from pathlib import Path

import pytest

from tests.processes import nimbus_dev

REPLICAS = 3


@pytest.mark.timeout(180)
def test_dev_lists_every_replica_first_and_removes_its_temporary_folder() -> None:
    proc, lines = nimbus_dev(
        "--replicas", str(REPLICAS), "--supervisors", "0", "--session-timeout", "4"
    )
    said: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while not said or "running; Ctrl-C to stop" not in said[-1]:
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, "".join(said)
            try:
                said.append(lines.get(timeout=left))
            except queue.Empty:
                continue
        text = "".join(said)
        listing = text[text.index("leader: ") :]
        assert len(re.findall(r"^  \S+:\d+ +(leader|follower) ", listing, re.M)) == REPLICAS, text
        found = re.search(r"log (/\S*/nimbus-dev-[^/\s]+)/replica-", text)
        assert found, text
        workdir = Path(found.group(1))
        assert workdir.is_dir()
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    assert code == 0
    assert not workdir.exists(), f"{workdir} left behind"
