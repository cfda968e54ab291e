"""storm-starter's examples as packages: each one's output equals its plain-Python oracle."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from pyspark.sql import SparkSession

from pipeline.package import load_topology
from pipeline.runner import run
from pipeline.sinks import read_batches
from tests.cluster import REPO

EXAMPLES = REPO / "examples"


def _oracle(example: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"oracle_{example}", EXAMPLES / example / "oracle.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _epoch(value: Any) -> int:
    stamp = datetime.fromisoformat(str(value))
    return int(stamp.replace(tzinfo=stamp.tzinfo or UTC).timestamp())


def window_rankings(out: Path) -> dict[int, list[tuple[str, int]]]:
    """The sink's rows as window start -> [(word, count)] in rank order; each window once."""
    found: dict[int, list[tuple[int, str, int]]] = {}
    for _, rows in read_batches(out):
        for row in rows:
            start = _epoch(row["window"]["start"])
            found.setdefault(start, []).append((row["rank"], row["word"], row["count"]))
    return {
        start: [(w, c) for _, w, c in sorted(ranked)] for start, ranked in sorted(found.items())
    }


def test_rolling_top_words_equals_its_oracle(spark: SparkSession, tmp_path: Path) -> None:
    oracle = _oracle("rolling-top-words")
    folder = EXAMPLES / "rolling-top-words"
    out = tmp_path / "out"
    topology = load_topology(folder, config={"output": str(out)})
    with run(topology, spark, tmp_path / "checkpoint", name="rtw") as running:
        assert running.await_termination(timeout=300)
    lines = [
        line for p in sorted((folder / "corpus").iterdir()) for line in p.read_text().splitlines()
    ]
    expected = oracle.rankings(lines)
    assert expected, "the corpus closes some windows"
    assert window_rankings(out) == expected
