"""A replica that wins the lock on its server's view but whose take-office the quorum
refuses (its server diverged, ZOOKEEPER-4837) must not loop: every queue attempt fires
the watch of every replica behind it. At most one attempt per ``REQUEUE_BACKOFF``, and
the server mover is asked to leave that server.

The refusal is planted in ZooKeeper itself: ``/epochs`` made read-only, so the
take-office multi-op (which creates ``/epochs/<n>``) fails its create on every attempt.
"""

from __future__ import annotations

import itertools
import time

from kazoo.client import KazooClient
from kazoo.security import make_acl

from cluster.paths import Paths
from fencing.membership import ensure_folders
from leader.elector import Elector
from leader.settings import REQUEUE_BACKOFF, ElectorCallbacks, ElectorSettings
from tests.waiting import wait_until

ROOT = "/storm"


def test_a_refused_take_office_queues_again_only_after_the_backoff_and_asks_to_move(
    zk_client: KazooClient,
) -> None:
    paths = Paths(ROOT)
    ensure_folders(zk_client, [p for p in paths.folders() if p != paths.epochs])
    zk_client.create(paths.epochs, acl=[make_acl("world", "anyone", read=True)], makepath=True)
    asked: list[str] = []
    queued: list[float] = []
    elector = Elector(
        zk_client,
        ElectorSettings(paths=paths, replica_id="stale:1", session_timeout=2.0),
        ElectorCallbacks(has_all_code=lambda: True, on_stale_server=asked.append),
    )
    elector.start()
    try:

        def attempts() -> int:
            queued.extend(
                time.monotonic()
                for _ in range(
                    sum(e == "queued for leadership" for e in elector.history) - len(queued)
                )
            )
            return len(queued)

        wait_until(lambda: attempts() >= 3, timeout=20, interval=0.01, message="three attempts")
        assert not elector.is_leader()
        assert any("could not take office" in e for e in elector.history)
        gaps = [b - a for a, b in itertools.pairwise(queued)]
        assert min(gaps) >= REQUEUE_BACKOFF * 0.9, f"queued again after {gaps}: a tight loop"
        assert asked and "could not take office" in asked[0], asked
    finally:
        elector.stop()
