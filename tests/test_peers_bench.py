"""bench/peers.py's pure parts: the run order, the "I lead" lines, the table and the JSON.

Nothing here starts a store or a candidate (the bench itself does, as root, for minutes).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def peers() -> Any:
    """bench/peers.py's pure parts, bench/_peers_figures.py, as a module (bench/ is scripts,
    not a package; it needs _common)."""
    sys.path.append(str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_peers", BENCH / "_peers_figures.py")
        assert spec is not None and spec.loader is not None
        module: ModuleType = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


SYSTEMS = ("this", "curator", "kazoo", "etcd")
FAULTS = ("graceful", "sigkill", "sigstop", "partition")


def test_schedule_runs_round_i_of_everything_before_round_i_plus_1(peers: Any) -> None:
    order = peers.schedule(SYSTEMS, FAULTS, 5)
    assert len(order) == 5 * len(SYSTEMS) * len(FAULTS)
    rounds = [r for r, _, _ in order]
    assert rounds == sorted(rounds)
    for i in range(5):
        cells = {(f, s) for r, f, s in order if r == i}
        assert cells == {(f, s) for f in FAULTS for s in SYSTEMS}
    # Systems alternate within a fault (interleaved), and no system is always first.
    assert [s for r, f, s in order if r == 0 and f == "sigkill"] == list(SYSTEMS)
    firsts = {next(s for r, f, s in order if r == i and f == "graceful") for i in range(4)}
    assert firsts == set(SYSTEMS)


def test_quick_is_one_trial_per_fault_and_system(peers: Any) -> None:
    order = peers.schedule(SYSTEMS, FAULTS, 1)
    assert sorted((f, s) for _, f, s in order) == sorted((f, s) for f in FAULTS for s in SYSTEMS)


def test_lead_lines_of_each_system(peers: Any) -> None:
    assert peers.parse_lead("curator", "I lead 1764079200123\n", 5.0) == 1764079200.123
    assert peers.parse_lead("kazoo", "I lead 1764079200123", 5.0) == 1764079200.123
    assert peers.parse_lead("kazoo", "queued 1764079200000", 5.0) is None
    assert peers.parse_lead("curator", "not leader 1764079200000", 5.0) is None
    # etcdctl lock prints the key it holds: the bench's read time is the figure.
    assert peers.parse_lead("etcd", "peers-etcd-ab12/694d7b2e\n", 7.5, "peers-etcd-ab12") == 7.5
    assert peers.parse_lead("etcd", '{"level":"warn"}', 7.5, "peers-etcd-ab12") is None
    line = json.dumps(
        {
            "time": "2026-11-25 14:00:01,250",
            "level": "INFO",
            "logger": "leader.elector",
            "replica": "10.78.3.10:6627",
            "epoch": 2,
            "message": "10.78.3.10:6627: took office, epoch 2",
        }
    )
    expected = datetime(2026, 11, 25, 14, 0, 1, 250_000).timestamp()
    assert peers.parse_lead("this", line, 0.0) == pytest.approx(expected)
    queued = line.replace("took office, epoch 2", "queued for leadership")
    assert peers.parse_lead("this", queued, 0.0) is None
    assert peers.parse_lead("this", "took office, but not JSON", 0.0) is None
    with pytest.raises(ValueError):
        peers.parse_lead("zab", "I lead 1", 0.0)


FIGURES = {
    "this": {"graceful": [0.04, 0.05, 0.03], "sigkill": [0.6, 0.55, None]},
    "curator": {"graceful": [0.02, 0.03, 0.025], "sigkill": [19.5, 20.1, 19.9]},
    "kazoo": {"graceful": [0.01, 0.012, 0.011], "sigkill": [19.2, 19.4, 19.3]},
    "etcd": {"graceful": [0.007, 0.008, 0.006], "sigkill": [None, None, None]},
}


def test_rows_are_p50_of_completed_trials(peers: Any) -> None:
    rows = peers.rows_p50(FIGURES)
    assert rows["this"] == {"graceful": 0.04, "sigkill": 0.575}
    assert rows["curator"]["sigkill"] == 19.9
    assert rows["etcd"]["sigkill"] is None
    assert peers.best_peer(rows, "sigkill") == ("kazoo", 19.3)
    assert peers.best_peer(rows, "graceful") == ("etcd", 0.007)


def test_json_has_every_row_and_fault_first(peers: Any) -> None:
    result = peers.result_json(20.0, FIGURES, trials=3, quick=False)
    assert list(result)[:2] == ["timeout_s", "rows"]
    assert result["timeout_s"] == 20 and isinstance(result["timeout_s"], int)
    assert set(result["rows"]) == set(SYSTEMS)
    assert all(set(row) == {"graceful", "sigkill"} for row in result["rows"].values())
    assert result["trials"] == 3
    assert result["per_trial_s"]["this"]["sigkill"] == [0.6, 0.55, None]
    assert json.loads(json.dumps(result)) == result  # one JSON line, as printed
    assert peers.result_json(4.5, FIGURES)["timeout_s"] == 4.5


def test_table_cells_and_ratio_row(peers: Any) -> None:
    table = peers.results_table(FIGURES, ("graceful", "sigkill"))
    lines = table.splitlines()
    assert lines[0].split() == ["system", "graceful", "s", "sigkill", "s"]
    this = next(line for line in lines if line.startswith("this "))
    assert "0.040 (0.030-0.050)" in this and "0.575 (0.550-0.600) 1 failed" in this
    assert "no leader" in next(line for line in lines if line.startswith("etcd"))
    ratio = next(line for line in lines if line.startswith("this / best peer"))
    assert "5.714 (etcd)" in ratio and "0.030 (kazoo)" in ratio
    assert peers.format_cell([]) == "-"
    assert peers.format_cell([1.0]) == "1.000"
