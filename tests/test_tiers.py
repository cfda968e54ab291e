"""The tiers are what the fixtures say: a test using replica processes, Spark, root or the
model check leaves the fast tier without a marker written on it; a test on one ZooKeeper
and a pure test stay in.

The selections run as ``./run-tests --fast`` runs them (its ``-m`` expression, read from
the script), in a pytest of their own that only collects.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.processes import REPO
from tests.tiers import HEAVY

SPARK_IN_PROCESS = "tests/test_pipeline.py::test_word_count_of_the_example_equals_a_python_count"
SPARK_IN_A_WORKER = (
    "tests/test_workers.py::test_a_killed_worker_restarts_with_exact_counts_and_stops_when_killed"
)
KERNEL_FAULTS = (
    "tests/test_code_push.py::"
    "test_a_submit_is_acknowledged_while_the_leaders_port_refuses_the_other_replicas"
)
MODEL_CHECK = "tests/test_model.py::test_model_check_passes"
REPLICAS = "tests/test_code_push.py::test_push_calls_need_a_token_and_get_named_statuses"
ZOOKEEPER_ONLY = "tests/test_code_push.py::test_a_topology_record_names_the_digest_too"
PURE = "tests/test_model.py::test_model_timing_is_the_codes"
ALL = (
    SPARK_IN_PROCESS,
    SPARK_IN_A_WORKER,
    KERNEL_FAULTS,
    MODEL_CHECK,
    REPLICAS,
    ZOOKEEPER_ONLY,
    PURE,
)


def fast_tier() -> str:
    """The ``-m`` expression of ``./run-tests --fast``."""
    found = re.search(r'^FAST_TIER="([^"]+)"$', (REPO / "run-tests").read_text(), re.MULTILINE)
    assert found is not None, "run-tests names its fast tier in one FAST_TIER= line"
    return found.group(1)


def selected(expression: str) -> set[str]:
    """Which of ``ALL`` pytest selects with ``-m expression`` (collecting only)."""
    files = sorted({test.split("::")[0] for test in ALL})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", expression, *files],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: none selected
    return {line for line in done.stdout.splitlines() if line in ALL}


def test_the_fast_tier_keeps_zookeeper_and_pure_tests_and_drops_the_heavy_ones() -> None:
    assert selected(fast_tier()) == {ZOOKEEPER_ONLY, PURE}


def test_spark_is_marked_whether_the_test_or_its_worker_starts_it() -> None:
    assert selected("spark") == {SPARK_IN_PROCESS, SPARK_IN_A_WORKER}


def test_every_tier_marker_is_registered_and_left_out_of_the_fast_tier() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    registered = config["tool"]["pytest"]["ini_options"]["markers"]
    assert {line.split(":")[0] for line in registered} >= HEAVY
    assert set(re.findall(r"not (\w+)", fast_tier())) == HEAVY


def test_no_test_starts_a_supervisor_with_workers_but_through_its_fixtures() -> None:
    """A ``nimbus supervisor`` or a ``nimbus dev`` with supervisors runs Spark in its
    workers; typed out by hand, it would leave its test in the fast tier. Every other
    command line has ``--no-workers`` or ``--supervisors 0``, or passes its caller's
    arguments through (a launcher such as ``tests.processes.nimbus_dev``: its callers are
    checked the same way). A miss this scan cannot see still finds no Spark to start in
    ``./run-tests --fast`` (its ``SPARK_HOME`` does not exist)."""
    command = re.compile(
        r'"nimbus\.cli\.cmd_supervisor"|"nimbus\.cli", "supervisor"|"nimbus\.cli", "dev"'
        r"|\bnimbus_dev\("
    )
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        if path.name == "supervisors.py":
            continue
        text = path.read_text()
        for found in command.finditer(text):
            line = text.count("\n", 0, found.start()) + 1
            # The rest of the command line: to the list's end, or the call's paragraph.
            end = "\n\n" if found.group().startswith("nimbus_dev") else "]"
            rest = text[found.end() : found.end() + 400].split(end, 1)[0]
            if text[found.start() - 4 : found.start()] == "def ":
                continue  # the launcher's definition
            if not any(ok in rest for ok in ("--no-workers", '"--supervisors", "0"', "*args")):
                offenders.append(f"{path.relative_to(REPO)}:{line}")
    assert offenders == [], "use supervisor_command or dev_command (tests/supervisors.py)"
