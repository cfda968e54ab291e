"""The slow-disk rows' ensemble: ZooKeeper's own follower deadline at long sessions."""

from __future__ import annotations

from tests.chaos.slow_disk import FSYNC_WARNING_CONFIG, ensemble_config


def test_long_sessions_get_zookeepers_default_follower_deadline() -> None:
    assert ensemble_config(2.0) == (FSYNC_WARNING_CONFIG,)  # the project's 3 s stays
    assert ensemble_config(20.0) == (FSYNC_WARNING_CONFIG, "syncLimit=50")  # 50 x 200 ms
    assert ensemble_config(20.0, tick_ms=2000) == (FSYNC_WARNING_CONFIG, "syncLimit=5")
