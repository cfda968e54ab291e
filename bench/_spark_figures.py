"""The tables and JSON of bench/wordcount.py and bench/windows.py: the per-run table, the
figures of the timed rounds (api against plain), the setup line and the footer."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from _common import load_1min, machine_facts, percentile, print_table
from _spark_baseline import (
    API,
    FILES,
    JOBS,
    MASTER,
    PARALLELISM,
    PLAIN,
    TARGET_RATIO,
    Measured,
    RunResult,
)


@dataclass(frozen=True)
class Column:
    """A column of the per-run table: header, alignment (``l``/``r``), the cell of a run."""

    header: str
    align: str
    cell: Callable[[RunResult], object]


def standard_columns(unit: str) -> dict[str, Column]:
    return {
        c.header: c
        for c in (
            Column("round", "l", lambda r: "warm-up" if r.round == 0 else str(r.round)),
            Column("job", "l", lambda r: r.job),
            Column("wall s", "r", lambda r: r.seconds),
            Column(f"{unit}/s", "r", lambda r: f"{r.rows_per_s:,.0f}"),
            Column("CPU s", "r", lambda r: f"{r.cpu_s or 0.0:.1f}"),
            Column("batches", "r", lambda r: r.batches),
            Column("out rows", "r", lambda r: r.output_rows),
            Column("in batches s", "r", lambda r: f"{r.trigger_ms / 1000:.3f}"),
            Column("outside s", "r", lambda r: f"{r.seconds - r.trigger_ms / 1000:.3f}"),
            Column("exact", "l", lambda r: "yes" if r.exact else "NO"),
        )
    }


def print_runs(results: Sequence[RunResult], columns: Sequence[Column]) -> None:
    print_table(
        [c.header for c in columns],
        [[c.cell(r) for c in columns] for r in results],
        align="".join(c.align for c in columns),
    )


@dataclass(frozen=True)
class Figures:
    """The timed rounds of both jobs, reduced: api against plain."""

    timed: dict[str, list[RunResult]]
    p50_s: dict[str, float]
    rate: dict[str, float]  # p50 rows per second
    best: dict[str, float]  # the best run's rows per second
    paired: list[float]  # api over plain, round by round
    exact: bool  # every run, warm-ups included
    cpu_p50: dict[str, float] | None  # where the runs were measured for CPU

    @property
    def ratio(self) -> float:
        return self.rate[API] / self.rate[PLAIN]

    @property
    def best_ratio(self) -> float:
        return self.best[API] / self.best[PLAIN]


def figures(results: Sequence[RunResult]) -> Figures:
    timed = {job: [r for r in results if r.job == job and r.round > 0] for job in JOBS}
    cpu = [r.cpu_s for r in results]
    return Figures(
        timed=timed,
        p50_s={job: percentile([r.seconds for r in timed[job]], 50) for job in JOBS},
        rate={job: percentile([r.rows_per_s for r in timed[job]], 50) for job in JOBS},
        best={job: max(r.rows_per_s for r in timed[job]) for job in JOBS},
        paired=[
            a.rows_per_s / p.rows_per_s
            for a, p in zip(timed[API], timed[PLAIN], strict=True)
            if a.round == p.round
        ],
        exact=all(r.exact for r in results),
        cpu_p50=None
        if None in cpu
        else {job: percentile([r.cpu_s or 0.0 for r in timed[job]], 50) for job in JOBS},
    )


def print_summary(f: Figures, descriptions: Mapping[str, str], unit: str) -> None:
    """The per-job summary table (with p50 CPU where measured) and the api/plain line."""
    rows: list[list[object]] = []
    for job in JOBS:
        secs = [r.seconds for r in f.timed[job]]
        row: list[object] = [
            job,
            descriptions[job],
            f.p50_s[job],
            min(secs),
            max(secs),
            f"{f.rate[job]:,.0f}",
            f"{f.rate[job] / f.rate[PLAIN]:.3f}x",
        ]
        if f.cpu_p50 is not None:
            row.append(f"{f.cpu_p50[job]:.1f}")
        rows.append(row)
    headers = ["job", "what", "p50 s", "min s", "max s", f"p50 {unit}/s", "over plain"]
    if f.cpu_p50 is not None:
        headers.append("p50 CPU s")
    print_table(headers, rows, align="ll" + "r" * (len(headers) - 2))
    print()
    print(
        f"api / plain (p50 {unit}/s): {f.ratio:.3f}x (target >= {TARGET_RATIO}); best run "
        f"{f.best_ratio:.3f}x; per round {', '.join(f'{x:.3f}' for x in f.paired)}"
    )


def print_head(m: Measured[Any], what: str, columns: Sequence[Column]) -> Figures:
    """The setup line (``what`` first: the bench, its corpus, the mode), a blank line, the
    per-run table, a blank line; the figures of the runs."""
    print(
        f"{what}, {m.corpus_bytes / 2**20:.1f} MiB in {FILES} files; "
        f"Spark {m.session.spark_version} {MASTER}, {PARALLELISM} shuffle partitions, "
        f"availableNow, fresh checkpoint per run; 1 warm-up + {m.rounds} interleaved rounds "
        "per job"
    )
    print()
    print_runs(m.session.results, columns)
    print()
    return figures(m.session.results)


def print_tail(m: Measured[Any], f: Figures, reference: str) -> tuple[dict[str, Any], float]:
    """Whether every run was exact (against ``reference``), the machine, the session's and
    the corpus's times, the wall time and the load; the JSON keys every such bench reports,
    and the load at the end."""
    facts = machine_facts()
    elapsed_s = time.monotonic() - m.began
    load_after = load_1min()
    print(f"exact in every run ({reference}): {'yes' if f.exact else 'NO'}")
    print(facts.line())
    print(
        f"SparkSession start {m.session.start_s:.1f} s; corpus written and its reference "
        f"computed in Python {m.corpus_s:.1f} s; wall time {elapsed_s:.1f} s; load (1 min) "
        f"{m.load_before:.2f} before, {load_after:.2f} after"
    )
    common = {
        "benchmark": m.name,
        "quick": m.quick,
        "corpus_bytes": m.corpus_bytes,
        "rounds": m.rounds,
        "spark_version": m.session.spark_version,
        **figures_json(f),
        "session_start_s": round(m.session.start_s, 2),
        "wall_s": round(elapsed_s, 2),
        "machine": facts.as_dict(),
    }
    return common, load_after


def figures_json(f: Figures) -> dict[str, Any]:
    """The JSON keys both benches report of the comparison."""
    return {
        "api_rows_per_s": round(f.rate[API]),
        "plain_rows_per_s": round(f.rate[PLAIN]),
        "api_p50_s": round(f.p50_s[API], 4),
        "plain_p50_s": round(f.p50_s[PLAIN], 4),
        "api_seconds": [round(r.seconds, 4) for r in f.timed[API]],
        "plain_seconds": [round(r.seconds, 4) for r in f.timed[PLAIN]],
        "api_over_plain": round(f.ratio, 4),
        "api_over_plain_per_round": [round(x, 4) for x in f.paired],
        "api_over_plain_best": round(f.best_ratio, 4),
        "target_ratio": TARGET_RATIO,
        "counts_exact": f.exact,
        "files": FILES,
        "master": MASTER,
        "parallelism": PARALLELISM,
    }
