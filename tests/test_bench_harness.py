"""Every bench still starts by its path, and no file in bench/ shadows a package.

``python bench/NAME.py`` puts bench/ first on ``sys.path``, where a ``bench/leader.py``
would be imported in place of the ``leader`` package. Each bench runs ``--help`` here as a
subprocess from the repo root, so a broken import or a harness module that moved fails this
test without starting anything; the names are checked against the project's packages and
the standard library.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
# Scripts a bench starts, not benches: they take positional arguments, not --help.
HELPERS = {"peers_kazoo.py"}
BENCHES = sorted(
    p.name for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name not in HELPERS
)


def test_the_benches_are_found() -> None:
    for name in ("scale", "windows", "wordcount", "peers"):
        assert f"{name}.py" in BENCHES
    for name in ("code_sync_throughput", "fencing_cost", "leader_failover"):
        assert f"{name}.py" in BENCHES


@pytest.mark.parametrize("name", BENCHES)
def test_bench_runs_help_by_its_path(name: str) -> None:
    done = subprocess.run(
        [sys.executable, f"bench/{name}", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_no_file_in_bench_is_named_like_a_package() -> None:
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert {"leader", "fencing", "code_sync", "tests"} <= packages
    taken = packages | set(sys.stdlib_module_names)
    shadowing = sorted(p.name for p in BENCH.glob("*.py") if p.stem in taken)
    assert shadowing == []
