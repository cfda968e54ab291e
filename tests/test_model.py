"""The SPIN model of election and fencing (model/election.pml), tied to the code.

The model's timing constants must be the code's defaults (leader/settings.py), so a change
of H, P, L_base, T_op, rho or k that the model has not been checked with fails here; its
whole-tick bounds are recomputed here in exact arithmetic, with the margins finer than a
tick that the model cannot see; and ``model/check`` must pass on the model and fail,
naming the property, on each planted bug.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest

from leader.settings import (
    CLOCK_RATE_BOUND,
    DEFAULT_BEAT_INTERVAL,
    DEFAULT_LEADER_LEASE,
    DEFAULT_SILENCE_WINDOW,
    LEASE_PER_LATENCY,
    LEASE_PER_WAIT,
    MAX_UNFENCED_ACTION,
    ONSET_WAIT,
    BeatSettings,
    margin_holds,
    short_window,
)
from tests.tiers import needs

MODEL_DIR = Path(__file__).resolve().parent.parent / "model"
MODEL = MODEL_DIR / "election.pml"
CHECK = MODEL_DIR / "check"
#: One full check compiles three verifiers and takes about 45 s on two idle cores (most of
#: it the two-fault search: about 6 million states); generous for a loaded CI machine.
CHECK_TIMEOUT = 300


def model_defines() -> dict[str, int]:
    """The numeric ``#define NAME <integer>`` lines of the model (the unplanted values)."""
    defines: dict[str, int] = {}
    for line in MODEL.read_text().splitlines():
        match = re.fullmatch(r"#define\s+([A-Z_]+)\s+(\d+)\b.*", line.strip())
        if match and match.group(1) not in defines:
            defines[match.group(1)] = int(match.group(2))
    return defines


def seconds(value: float) -> Fraction:
    """A default in seconds, exactly as written (0.2 is 1/5, not the nearest binary)."""
    return Fraction(repr(value))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def test_model_timing_is_the_codes() -> None:
    d = model_defines()
    assert Fraction(d["H_MS"], 1000) == seconds(DEFAULT_BEAT_INTERVAL)
    assert Fraction(d["P_MS"], 1000) == seconds(DEFAULT_SILENCE_WINDOW)
    assert Fraction(d["L_MS"], 1000) == seconds(DEFAULT_LEADER_LEASE)
    assert Fraction(d["TOP_MS"], 1000) == seconds(MAX_UNFENCED_ACTION)
    assert Fraction(1, d["RHO_INV"]) == seconds(CLOCK_RATE_BOUND)
    # the model's LONG lease stands for any of the code's announcements (its header)
    assert Fraction(d["K_LAT_TENTHS"], 10) == seconds(LEASE_PER_LATENCY)
    assert d["K_WAIT"] == seconds(LEASE_PER_WAIT)
    assert Fraction(d["ONSET_TENTHS"], 10) == seconds(ONSET_WAIT)
    # the ratios the model's behaviour depends on
    h = seconds(DEFAULT_BEAT_INTERVAL)
    assert Fraction(d["P_MS"], d["H_MS"]) == seconds(DEFAULT_SILENCE_WINDOW) / h
    assert Fraction(d["L_MS"], d["H_MS"]) == seconds(DEFAULT_LEADER_LEASE) / h


def short_ms(lease_ms: int, d: dict[str, int]) -> Fraction:
    """S_v = (L_v + T_op)*(1+rho)/(1-rho), in ms, exactly (T_op too is timed on the
    sender's clock)."""
    rho = Fraction(1, d["RHO_INV"])
    return (lease_ms + d["TOP_MS"]) * (1 + rho) / (1 - rho)


def ticks(ms: Fraction, d: dict[str, int]) -> int:
    """A duration in ms as whole ticks, rounded up."""
    return -(-ms // d["TICK_MS"])


def test_model_margin_is_the_protocols() -> None:
    """The margins in exact arithmetic, and as the model's whole ticks (PLO, CEND, SLO)."""
    d = model_defines()
    rho = Fraction(1, d["RHO_INV"])
    p, lease, t_op = (Fraction(d[k], 1000) for k in ("P_MS", "L_MS", "TOP_MS"))
    assert lease * (1 + rho) + t_op <= p * (1 - rho)
    assert margin_holds(leader_lease=DEFAULT_LEADER_LEASE, silence_window=DEFAULT_SILENCE_WINDOW)
    # the short window of a replica heard dead: still the whole claim and T_op, shorter
    # than P, and what the code computes
    s_base = short_ms(d["L_MS"], d) / 1000
    assert (lease + t_op) * (1 + rho) <= s_base * (1 - rho)
    assert s_base <= p * (1 - rho)
    assert abs(short_window(DEFAULT_LEADER_LEASE) - float(s_base)) < 1e-9
    code = BeatSettings()
    assert code.dead_window(DEFAULT_LEADER_LEASE) == pytest.approx(float(s_base))
    assert code.window(DEFAULT_LEADER_LEASE) == pytest.approx(float(p))
    # the model's derived bounds (election.pml: PLO, LMAX, CEND, SLO, WLO), recomputed
    plo = ticks(Fraction(d["P_MS"]) / (1 + rho), d)
    for lease_ms, cls in ((d["L_MS"], "B"), (d["LL_MS"], "L")):
        lmax = ticks(Fraction(lease_ms) / (1 - rho), d) - 1
        cend = ticks((Fraction(lease_ms) + d["TOP_MS"]) / (1 - rho), d)
        slo = ticks(short_ms(lease_ms, d) / (1 + rho), d)
        assert d[f"SLO_{cls}"] == slo, f"SLO_{cls} is not the short window in ticks"
        # a claim and its unfenced action end no later than the short window fires (and
        # so than W_v = max(P, S_v))
        assert cend <= slo
        if cls == "B":
            assert cend <= plo  # the margin L*(1+rho) + T_op <= P*(1-rho), in ticks
        # and in exact arithmetic, for the model's value as for any other
        lease_s, short_s = Fraction(lease_ms, 1000), short_ms(lease_ms, d) / 1000
        assert lease_s * (1 + rho) + t_op <= short_s * (1 - rho)
        assert code.window(float(lease_s)) == pytest.approx(float(max(p, short_s)))
        if cls == "L":
            # LONG outlives the SLOW round trip (so a slow ZooKeeper still has a leader),
            # and its window is longer than P (so both branches of W_v are exercised)
            assert lmax >= d["D_SLOW"] + 1
            assert short_ms(lease_ms, d) > d["P_MS"]
    assert ceil_div(d["H_MS"], d["TICK_MS"]) == 1, "the model beats once a tick"
    assert d["K_WAIT"] * d["TICK_MS"] > d["L_MS"], "a beat in flight for a tick announces LONG"
    assert d["D_SLOW"] * d["TICK_MS"] > d["L_MS"], "a SLOW ZooKeeper answers after L_base"
    assert d["H_MS"] < d["L_MS"] < d["LL_MS"]
    assert d["H_MS"] < d["L_MS"] < d["P_MS"]


def run_check(*defines: str, depth: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if depth is not None:
        env["MODEL_CHECK_DEPTH"] = str(depth)
    return subprocess.run(
        [str(CHECK), *defines],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT,
        check=False,
    )


Check = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
@needs("model")
def model_check() -> Check:
    """``model/check`` (SPIN and gcc): ``model_check(*defines, depth=None)``."""
    if shutil.which("spin") is None or shutil.which("gcc") is None:
        pytest.skip("spin or gcc missing (deploy/local/spin.sh installs them)")
    return run_check


def test_model_check_passes(model_check: Check) -> None:
    result = model_check()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if "complete search" in line]
    assert len(lines) == 3, result.stdout
    assert all("errors: 0" in line for line in lines), result.stdout


#: Each planted bug and the property its counterexample must name.
PLANTED = {
    "PLANT_UNFENCED_WRITE": "VIOLATED: fencing",
    "PLANT_LONG_LEASE": "VIOLATED: one-claim",
    "PLANT_UNCHECKED_PREEMPT": "VIOLATED: one-claim",
    "PLANT_NO_WINDOW_RESET": "VIOLATED: no-false-failover",
    "PLANT_RETRY_WITHOUT_ID": "VIOLATED: at-most-once",
    "PLANT_PREEMPT_FRESH_VERSION": "VIOLATED: one-claim",
    "PLANT_OFFICE_NOT_BEAT": "VIOLATED: one-claim",
    "PLANT_LEASE_FROM_ACK": "VIOLATED: one-claim",
    "PLANT_BEAT_BEHIND_GATE": "VIOLATED: no-false-failover",
    # DESIGN item 9: false evidence and latency
    "PLANT_REFUSED_IS_DEAD": "VIOLATED: no-false-failover",
    "PLANT_CLOSE_IS_DEATH": "VIOLATED: no-false-failover",
    "PLANT_FIXED_LEASE": "property violated: live",
    "PLANT_LEASE_SHRINKS": "VIOLATED: one-claim",
    "PLANT_FIXED_WINDOW": "VIOLATED: one-claim",
    "PLANT_SHORT_WITHOUT_TOP": "VIOLATED: one-claim",
    "PLANT_OWN_GAP_LEASE": "VIOLATED: no-false-failover",
    "PLANT_FOLD_ANY_TARGET": "VIOLATED: fencing",
}


@pytest.mark.parametrize("plant", sorted(PLANTED))
def test_model_check_finds_planted_bug(model_check: Check, plant: str) -> None:
    planted = re.search(rf"^#ifn?def {plant}$", MODEL.read_text(), re.MULTILINE)
    assert planted is not None, f"{plant} is not planted in the model"
    result = model_check(f"-D{plant}")
    assert result.returncode == 1, result.stdout + result.stderr
    errors = re.search(r"counterexample \(errors: (\d+)", result.stdout)
    assert errors is not None and int(errors.group(1)) >= 1, result.stdout
    assert PLANTED[plant] in result.stdout, result.stdout
    assert re.search(r"^step 1: t=\d+ ", result.stdout, re.MULTILINE), result.stdout


def test_model_check_refuses_bad_arguments(model_check: Check) -> None:
    assert model_check("--fast").returncode == 2


def test_model_check_reports_a_truncated_search(model_check: Check) -> None:
    result = model_check(depth=40)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "could not complete" in result.stderr, result.stderr
