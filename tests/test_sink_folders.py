"""A file sink folder holds one topology's batches: a resubmitted topology writing where a
killed one wrote gets its own output, never the old counts (nothing is deleted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.errors import SinkError
from pipeline.sinks import OWNER_FILE, adopt_folder, read_batches


def _batch(folder: Path, batch_id: int, rows: list[dict[str, object]]) -> None:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (folder / f"batch-{batch_id:012d}.jsonl").write_text(text)


def test_a_new_topology_moves_a_killed_ones_batches_aside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert adopt_folder(out, "wc-1-1", lambda _: False) is None
    _batch(out, 0, [{"word": "a", "count": 275}])
    assert adopt_folder(out, "wc-1-1", lambda _: False) is None, "its own folder: untouched"
    assert read_batches(out) == [(0, [{"word": "a", "count": 275}])]
    moved = adopt_folder(out, "wc-2-9", lambda tid: tid == "other")
    assert moved is not None and "wc-1-1" in moved
    assert read_batches(out) == [], "batch 0 of the new topology will be published, not skipped"
    assert read_batches(out / ".previous-wc-1-1") == [(0, [{"word": "a", "count": 275}])]
    assert (out / OWNER_FILE).read_text().strip() == "wc-2-9"
    assert (out / OWNER_FILE).stat().st_mode & 0o777 == 0o644


def test_a_folder_of_a_live_topology_is_refused_and_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    adopt_folder(out, "a-1-1", lambda _: False)
    _batch(out, 0, [{"n": 1}])
    with pytest.raises(SinkError, match="live topology a-1-1"):
        adopt_folder(out, "b-1-1", lambda tid: tid == "a-1-1")
    assert read_batches(out) == [(0, [{"n": 1}])]


def test_batches_of_an_unknown_earlier_run_are_kept_aside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _batch(out, 0, [{"n": 1}])  # written before folders had owners
    assert adopt_folder(out, "c-1-1", lambda _: False) is not None
    assert read_batches(out / ".previous-unknown") == [(0, [{"n": 1}])]
