"""bench/merge_results.py: rows measured later join the quoted file, never across settings."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("merge_results", REPO / "bench" / "merge_results.py")
assert _SPEC is not None and _SPEC.loader is not None
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)  # a bench script, not a package: loaded by its path
MergeError, merge = _MODULE.MergeError, _MODULE.merge


def _results(t: float, **faults: int) -> dict[str, object]:
    return {
        "session_timeout_s": t,
        "faults": {name: {"failed_calls": failed} for name, failed in faults.items()},
        "trial_details": [{"fault": name} for name in faults],
    }


def test_rows_replace_their_namesakes_and_keep_the_rest() -> None:
    old = _results(4.0, sigkill=0, **{"zk-slow-disk@0.9": 5})
    new = _results(4.0, **{"zk-slow-disk@0.9": 0, "zk-slow-disk@0.45": 1})
    merged = merge(new, old, "new.json")
    assert set(merged["faults"]) == {"sigkill", "zk-slow-disk@0.9", "zk-slow-disk@0.45"}
    assert merged["faults"]["zk-slow-disk@0.9"] == {"failed_calls": 0}
    assert [t["fault"] for t in merged["trial_details"]].count("zk-slow-disk@0.9") == 1
    assert merged["failed_calls"] == 1
    assert merged["merged"][-1]["from"] == "new.json"


def test_rows_of_another_session_timeout_are_refused() -> None:
    with pytest.raises(MergeError, match="session_timeout_s differs"):
        merge(_results(20.0, sigkill=0), _results(4.0, sigkill=0), "t20.json")


def test_the_command_names_what_it_could_not_merge(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(_results(20.0, sigkill=0)))
    (tmp_path / "b.json").write_text(json.dumps(_results(4.0, sigkill=0)))
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "merge_results.py"), str(tmp_path / "a.json"),
         str(tmp_path / "b.json")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "session_timeout_s differs" in done.stderr
    assert json.loads((tmp_path / "b.json").read_text())["session_timeout_s"] == 4.0
