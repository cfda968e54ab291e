"""bench/peers.py's pure parts: the run order, the "I lead" lines, the slow-disk column's
poll rounds, the table and the JSON.

Nothing here starts a store or a candidate (the bench itself does, as root, for minutes).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import threading
import time
from concurrent.futures import Future
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


def test_a_fault_may_have_rounds_of_its_own(peers: Any) -> None:
    # --quick: five graceful rounds (a median to compare), one of every other fault.
    order = peers.schedule(SYSTEMS, FAULTS, 1, {"graceful": 5})
    assert sorted((f, s) for r, f, s in order if r == 0) == sorted(
        (f, s) for f in FAULTS for s in SYSTEMS
    )
    assert {f for r, f, _ in order if r > 0} == {"graceful"}
    assert all(sum(1 for _, f, s in order if f == "graceful" and s == x) == 5 for x in SYSTEMS)
    firsts = [next(s for r, f, s in order if r == i) for i in range(4)]
    assert sorted(firsts) == sorted(SYSTEMS)  # rotated, as every round


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


def test_millisecond_figures_keep_their_ratio(peers: Any) -> None:
    # A graceful handover takes a few milliseconds: medians rounded to the millisecond
    # (0.0045 -> 0.005 s, 0.0030 -> 0.003 s) made a 1.50 ratio print as 1.667.
    figures = {
        "this": {"graceful": [0.0044, 0.0045, 0.0046]},
        "kazoo": {"graceful": [0.0029, 0.0030, 0.0031]},
    }
    rows = peers.result_json(20.0, figures)["rows"]
    assert rows["this"]["graceful"] == 0.0045 and rows["kazoo"]["graceful"] == 0.003
    lines = peers.results_table(figures, ("graceful",)).splitlines()
    assert "0.0045 (0.0044-0.0046)" in next(line for line in lines if line.startswith("this "))
    ratio = next(line for line in lines if line.startswith("this / best peer"))
    assert "1.500 (kazoo)" in ratio


# -- the slow-disk column: the leaderless fraction of poll rounds --------------------------


def rounds_of(peers: Any, *claims: str, every: float = 0.05) -> list[Any]:
    """Rounds from strings such as "L.." (candidate 0 claims, 1 and 2 do not)."""
    return [
        peers.PollRound(i * every, tuple(c == "L" for c in round_))
        for i, round_ in enumerate(claims)
    ]


def test_leaderless_fraction_counts_rounds_with_no_claim(peers: Any) -> None:
    assert peers.leaderless_fraction(rounds_of(peers, "L..", "L..", ".L.", "..L")) == 0.0
    assert peers.leaderless_fraction(rounds_of(peers, "...", "...")) == 1.0
    # Three of ten rounds without a claim; two claims in one round are still a claim.
    ten = rounds_of(peers, "L..", "...", "...", "L..", "LL.", "...", ".L.", ".L.", ".L.", ".L.")
    assert peers.leaderless_fraction(ten) == pytest.approx(0.3)
    assert peers.double_claims(ten) == 1
    assert peers.claimants(ten) == [0, 1]
    # Nothing polled is nothing measured, not "always led".
    assert peers.leaderless_fraction([]) is None


def test_only_rounds_sent_while_the_fault_is_on_count(peers: Any) -> None:
    rounds = rounds_of(peers, "L..", "L..", "...", "...", "L..", "L..", every=1.0)
    window = peers.in_window(rounds, 2.0, 4.0)  # [on, off): rounds at 2.0 and 3.0
    assert [r.at for r in window] == [2.0, 3.0]
    assert peers.leaderless_fraction(window) == 1.0
    assert peers.leaderless_fraction(peers.in_window(rounds, 0.0, 6.0)) == pytest.approx(2 / 6)
    assert peers.in_window(rounds, 10.0, 20.0) == []


def test_a_claim_counts_only_when_answered_within_the_deadline(peers: Any) -> None:
    sent = 100.0
    answers = [(True, 100.999), (True, 101.2), (False, 100.01)]  # in time, late, "follower"
    assert peers.round_claims(sent, answers, 1.0) == (True, False, False)
    assert peers.round_answered(sent, answers, 1.0) == (True, False, True)
    assert peers.round_claims(sent, [None, (True, 101.0)], 1.0) == (False, True)  # at 1 s
    late_only = peers.PollRound(sent, peers.round_claims(sent, [(True, 101.5), None], 1.0))
    assert peers.leaderless_fraction([late_only]) == 1.0


def test_longest_leaderless_stretch(peers: Any) -> None:
    rounds = rounds_of(peers, "L..", "...", "...", "...", "L..", "...", every=0.5)
    assert peers.longest_leaderless_s(rounds) == pytest.approx(1.5)  # 0.5 .. 2.0
    assert peers.leaderless_stretches(rounds) == [(0.5, 1.5), (2.5, 0.0)]
    assert peers.longest_leaderless_s(rounds_of(peers, "L..", "L..")) == 0.0
    assert peers.longest_leaderless_s(rounds_of(peers, ".L.", "...", "...")) == pytest.approx(0.05)


def test_poll_replies_of_the_candidates(peers: Any) -> None:
    assert peers.parse_poll_reply("poll 12 L 1764079200123\n") == (12, True)
    assert peers.parse_poll_reply("poll 0 F 1764079200123") == (0, False)
    assert peers.parse_poll_reply("poll 3 F") == (3, False)
    assert peers.parse_poll_reply("poll x L 1") is None
    assert peers.parse_poll_reply("poll 3") is None
    assert peers.parse_poll_reply("I lead 1764079200123") is None


def test_strace_delays_both_syncs_of_every_thread(peers: Any) -> None:
    assert peers.strace_command(4242, 0.9) == [
        "strace", "-f", "-e", "trace=fdatasync,fsync",
        "-e", "inject=fdatasync,fsync:delay_exit=900000", "-p", "4242",
    ]  # fmt: skip
    assert "inject=fdatasync:delay_exit=450000" in peers.strace_command(1, 0.45, ("fdatasync",))


SLOW = {
    "this": {"sigkill": [0.6], "slow-disk": [0.912]},
    "curator": {"sigkill": [16.9], "slow-disk": [0.0]},
    "kazoo": {"sigkill": [16.9], "slow-disk": [0.0]},
    "etcd": {"sigkill": [17.1], "slow-disk": [None]},
}


def test_slow_disk_column_in_table_and_json(peers: Any) -> None:
    table = peers.results_table(SLOW, ("sigkill", "slow-disk"))
    lines = table.splitlines()
    assert lines[0].split() == ["system", "sigkill", "s", "slow-disk"]  # a fraction: no unit
    assert next(line for line in lines if line.startswith("this ")).split()[-1] == "0.912"
    assert next(line for line in lines if line.startswith("curator")).split()[-1] == "0.000"
    assert next(line for line in lines if line.startswith("etcd")).split()[-1] == "failed"
    ratio = next(line for line in lines if line.startswith("this / best peer"))
    assert ratio.split()[-1] == "-"  # no ratio over a peer at 0
    result = peers.result_json(20.0, SLOW)
    assert result["rows"]["this"]["slow-disk"] == 0.912
    assert result["rows"]["kazoo"]["slow-disk"] == 0.0
    assert result["rows"]["etcd"]["slow-disk"] is None
    assert json.loads(json.dumps(result)) == result


def test_slow_disk_trials_interleave_the_systems(peers: Any) -> None:
    order = peers.schedule(SYSTEMS, ("slow-disk",), 2)
    assert [s for _, _, s in order] == [*SYSTEMS, *SYSTEMS[1:], SYSTEMS[0]]


@pytest.fixture(scope="module")
def slowdisk() -> Any:
    """bench/_peers_slowdisk.py (its poll clock, no store, no candidate)."""
    sys.path.append(str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_slowdisk", BENCH / "_peers_slowdisk.py"
        )
        assert spec is not None and spec.loader is not None
        module: ModuleType = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


class FakeAsker:
    """Answers at once, after ``delay`` s, or never; "leads" from round ``leads_from`` on."""

    def __init__(self, *, leads_from: int | None, delay: float | None = 0.0) -> None:
        self.leads_from, self.delay = leads_from, delay
        self.closed = False

    def ask(self, n: int) -> Any:
        future: Future[Any] = Future()
        leads = self.leads_from is not None and n >= self.leads_from
        if self.delay is None:
            return future  # never answered
        if self.delay == 0.0:
            future.set_result((leads, time.monotonic()))
        else:
            timer = threading.Timer(
                self.delay, lambda: future.set_result((leads, time.monotonic()))
            )
            timer.daemon = True
            timer.start()
        return future

    def close(self) -> None:
        self.closed = True


def test_polls_on_a_fixed_clock_and_late_answers_are_no_claim(slowdisk: Any) -> None:
    leader = FakeAsker(leads_from=4)  # claims from its fifth round on
    slow = FakeAsker(leads_from=0, delay=slowdisk.ANSWER_S + 0.3)  # always too late
    silent = FakeAsker(leads_from=0, delay=None)
    polls = slowdisk.Polls([leader, slow, silent]).start()
    time.sleep(0.6)
    rounds = polls.stop()
    assert leader.closed and slow.closed and silent.closed
    # Every 50 ms for 0.6 s, whatever the answers' pace (1.3 s, never): not one round
    # waits for the last one's answers.
    assert 6 <= len(rounds) <= 14
    assert max(b.at - a.at for a, b in itertools.pairwise(rounds)) < 0.5
    assert all(r.claims[1:] == (False, False) for r in rounds)
    assert [r.claims[0] for r in rounds[:6]] == [False] * 4 + [True] * 2
    fraction = slowdisk.leaderless_fraction(rounds)
    assert fraction == pytest.approx(4 / len(rounds))
    # The leader answered every round ("not I" in the first four), the others none in time.
    assert slowdisk.answered_rounds(rounds) == [len(rounds), 0, 0]
