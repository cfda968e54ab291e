"""The soak's divergence evidence: every server's digest mismatches, before and after."""

from __future__ import annotations

from devtools.zkserver import ZooKeeperCluster
from tests.chaos.zk_digest import KEY, mismatches, parse_mntr, rose


def test_a_rise_on_any_server_is_divergence_and_unknown_readings_are_not() -> None:
    assert rose({0: 0, 1: 0, 2: 0}, {0: 0, 1: 2, 2: 0})
    assert not rose({0: 0, 1: 3}, {0: 0, 1: 3})
    assert not rose({0: None, 1: 0}, {0: 5, 1: None})  # nothing known on both sides
    assert not rose({}, {0: 1})
    assert parse_mntr(f"zk_version\t3.9.5\n{KEY}\t7\nnoise\n") == {
        "zk_version": "3.9.5",
        KEY: "7",
    }


def test_each_server_of_a_real_ensemble_reports_its_count() -> None:
    with ZooKeeperCluster(size=3) as zk:
        counts = mismatches(zk)
        assert counts == {0: 0, 1: 0, 2: 0}
        zk.kill(1)
        assert mismatches(zk)[1] is None  # unreachable: no reading, not zero
    assert mismatches(object()) == {}  # an ensemble this process did not start
