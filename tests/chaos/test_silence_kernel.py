"""A leader cut from ZooKeeper by the kernel, at Storm's T = 20 s: replaced in seconds by
silence preemption (its beat stops at ZooKeeper), not after its session expires.

Replicas run in network namespaces (``tests.chaos.kernel_cluster``); the cut is iptables in
the leader's namespace. The new leader is what the replicas answer over gRPC, as a client
sees it. The 5 s bound is loose for CI; the defaults put it near P = 2 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.netns import Cut
from tests.chaos.kernel_cluster import KernelCluster
from tests.waiting import wait_until

T = 20.0
BOUND_S = 5.0


@pytest.fixture
def cluster(kernel_cluster: type[KernelCluster], tmp_path: Path) -> Iterator[KernelCluster]:
    made = kernel_cluster(tmp_path, session_timeout=T)
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("what", [Cut.ZOOKEEPER_BOTH, Cut.ZOOKEEPER_IN])
def test_a_leader_cut_from_zookeeper_is_replaced_within_seconds(
    cluster: KernelCluster, what: Cut
) -> None:
    leader, epoch = cluster.wait_healthy(120)
    polls: list[dict[int, int]] = []  # replica -> epoch, for each replica claiming, per poll
    cut_at = time.monotonic()
    cluster.cut(leader, what)
    try:

        def newer() -> tuple[int, int] | None:
            claims = cluster.claims()
            polls.append(claims)
            if len(claims) != 1:
                return None
            found = next(iter(claims.items()))
            return found if found[1] > epoch else None

        new = wait_until(newer, timeout=T * 2, interval=0.05, message="a new leader")
        took = time.monotonic() - cut_at
    finally:
        cluster.heal(leader)
    assert new is not None and new[0] != leader
    # The cut leader still answers gRPC: its claim lease (L) ends it before P lets the new.
    assert [c for c in polls if len(c) > 1] == [], "two replicas claimed in one poll"
    assert took < BOUND_S, f"failover after {what.name} took {took:.2f}s at T={T}"
    # Healed, the old leader rejoins as a follower: one leader, the new one.
    healthy = cluster.wait_healthy(120)
    assert healthy[1] >= new[1]
