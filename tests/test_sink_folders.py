"""A file sink folder holds one topology's batches: a resubmitted topology writing where a
killed one wrote gets its own output, never the old counts (nothing is deleted)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from pipeline.errors import SinkError, UnaccountedBatchError
from pipeline.lineage import (
    META_DIR,
    account_for,
    checkpoint_lineage,
    last_planned_batch,
    published_by,
    record_published,
    sink_checkpoint,
)
from pipeline.sinks import OWNER_FILE, GivesUp, adopt_folder, read_batches


def _batch(folder: Path, batch_id: int, rows: list[dict[str, object]]) -> None:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (folder / f"batch-{batch_id:012d}.jsonl").write_text(text)


def test_a_new_topology_moves_a_killed_ones_batches_aside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert adopt_folder(out, "wc-1-1", lambda _: True) is None
    _batch(out, 0, [{"word": "a", "count": 275}])
    assert adopt_folder(out, "wc-1-1", lambda _: True) is None, "its own folder: untouched"
    assert read_batches(out) == [(0, [{"word": "a", "count": 275}])]
    moved = adopt_folder(out, "wc-2-9", lambda tid: tid != "other")
    assert moved is not None and "wc-1-1" in moved
    assert read_batches(out) == [], "batch 0 of the new topology will be published, not skipped"
    assert read_batches(out / ".previous-wc-1-1") == [(0, [{"word": "a", "count": 275}])]
    assert (out / OWNER_FILE).read_text().strip() == "wc-2-9"
    assert (out / OWNER_FILE).stat().st_mode & 0o777 == 0o644


def test_a_folder_of_a_scheduled_topology_is_refused_and_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    adopt_folder(out, "a-1-1", lambda _: True)
    _batch(out, 0, [{"n": 1}])
    with pytest.raises(SinkError, match="topology a-1-1, which is still scheduled"):
        adopt_folder(out, "b-1-1", lambda tid: tid != "a-1-1")
    assert read_batches(out) == [(0, [{"n": 1}])]


def test_batches_of_an_unknown_earlier_run_are_kept_aside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _batch(out, 0, [{"n": 1}])  # written before folders had owners
    assert adopt_folder(out, "c-1-1", lambda _: True) is not None
    assert read_batches(out / ".previous-unknown") == [(0, [{"n": 1}])]


def test_a_second_move_of_one_owner_never_overwrites_its_archive(tmp_path: Path) -> None:
    out = tmp_path / "out"
    adopt_folder(out, "a-1-1", lambda _: True)
    _batch(out, 0, [{"run": 1}])
    adopt_folder(out, "b-1-1", lambda _: True)
    (out / OWNER_FILE).write_text("a-1-1\n")  # a-1-1's folder again (restored by hand)
    _batch(out, 0, [{"run": 2}])
    adopt_folder(out, "c-1-1", lambda _: True)
    assert read_batches(out / ".previous-a-1-1") == [(0, [{"run": 1}])]
    assert read_batches(out / ".previous-a-1-1-2") == [(0, [{"run": 2}])]


def test_the_checkpoint_and_records_beside_the_output_move_with_their_batches(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    adopt_folder(out, "a-1-1", lambda _: True)
    lineage = checkpoint_lineage(sink_checkpoint(out))
    _batch(out, 0, [{"n": 1}])
    record_published(out, 0, lineage, rows=1)
    adopt_folder(out, "b-1-1", lambda _: True)
    assert not (out / META_DIR).exists(), "b-1-1 starts with a checkpoint of its own"
    archived = out / ".previous-a-1-1"
    assert checkpoint_lineage(sink_checkpoint(archived)) == lineage
    assert published_by(archived, 0) == lineage


def test_adoption_is_exclusive(tmp_path: Path) -> None:
    """Two topologies adopting one killed owner's folder: one wins, the other is refused."""
    out = tmp_path / "out"
    adopt_folder(out, "old-1-1", lambda _: True)
    first_waiting, release = threading.Event(), threading.Event()

    def drains(owner: str) -> bool:  # the first adopter waits for old-1-1's workers
        first_waiting.set()
        return release.wait(30)

    results: dict[str, object] = {}

    def adopt(tid: str, gives_up: GivesUp) -> None:
        try:
            results[tid] = adopt_folder(out, tid, gives_up)
        except SinkError as e:
            results[tid] = e

    first = threading.Thread(target=adopt, args=("a-2-2", drains))
    first.start()
    assert first_waiting.wait(30)
    second = threading.Thread(target=adopt, args=("b-3-3", lambda tid: tid == "old-1-1"))
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert (out / OWNER_FILE).read_text().strip() == "a-2-2"
    assert isinstance(results["b-3-3"], SinkError), "the loser sees the winner, still scheduled"


def test_a_batch_published_by_another_checkpoint_is_refused_not_skipped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    mine = checkpoint_lineage(tmp_path / "ckpt-a")
    assert checkpoint_lineage(tmp_path / "ckpt-a") == mine, "a lineage is made once"
    theirs = checkpoint_lineage(tmp_path / "ckpt-b")
    assert theirs != mine
    _batch(out, 0, [{"n": 1}])
    record_published(out, 0, mine, rows=1)
    account_for(out, 0, out / "batch-000000000000.jsonl", mine)  # a replay: accounted for
    with pytest.raises(UnaccountedBatchError, match="published by checkpoint lineage"):
        account_for(out, 0, out / "batch-000000000000.jsonl", theirs)
    _batch(out, 1, [{"n": 2}])  # planted: nobody recorded it
    with pytest.raises(UnaccountedBatchError, match="no checkpoint on record"):
        account_for(out, 1, out / "batch-000000000001.jsonl", mine)


def test_last_planned_batch_reads_the_offsets_log(tmp_path: Path) -> None:
    assert last_planned_batch(tmp_path) == -1
    (tmp_path / "offsets").mkdir()
    for name in ("0", "1", "7", ".7.tmp"):
        (tmp_path / "offsets" / name).write_text("v1")
    assert last_planned_batch(tmp_path) == 7
