"""Every bench still starts by its path, and none shadows a package of the same name.

``python bench/NAME.py`` puts bench/ first on ``sys.path``, where ``bench/leader.py``,
``fencing.py`` and ``code_sync.py`` would be imported in place of the packages. Each bench
runs ``--help`` here as a subprocess from the repo root, so a broken import, a shadowed
package or a harness module that moved fails this test without starting anything.
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
    for name in ("scale", "windows", "wordcount", "code_sync", "fencing", "leader", "peers"):
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


def test_the_harness_puts_the_packages_before_the_benches() -> None:
    """As run by path: bench/ first on sys.path; after ``_common`` the packages win."""
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import _common; "
        "import leader, fencing, code_sync; "
        "print(leader.__file__, fencing.__file__, code_sync.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(BENCH)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    files = [Path(f) for f in done.stdout.split()]
    assert [f.parent.name for f in files] == ["leader", "fencing", "code_sync"]
    assert all(f.name == "__init__.py" and f.parent.parent == REPO for f in files)
