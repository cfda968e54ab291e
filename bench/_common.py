"""Shared helpers for the benchmarks: percentiles, a plain-text table, machine facts.

bench/ is not a package: each benchmark is a script run from the repo root
(``python bench/<name>.py``), so Python puts bench/ first on ``sys.path``. No file in
bench/ is named like a package (``tests/test_bench_harness.py`` checks it), so the
project's packages and the bench's own ``_*`` helpers import side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from devtools.zklocate import free_ports

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# The project's packages are installed (editable); ``tests.chaos``, which the chaos benches
# drive, is not: the repo root goes on the path, after bench/.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

NS_PER_MS = 1_000_000


class BenchError(RuntimeError):
    """The system under test did not do what the bench needs (the message says what, with
    the log tails of the processes involved)."""


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """SIGTERM exits through the bench's finally blocks, which stop what it started."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def bench_parser(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """The bench's command line: its docstring's first line and ``--quick``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    return parser


def cannot_make(what: str, why_not: str | None) -> bool:
    """True, once stderr says so, where ``what`` cannot be made on this machine (``why_not``:
    the reason, None where it can)."""
    if why_not is None:
        return False
    print(f"{what} cannot be made here: {why_not}", file=sys.stderr)
    return True


def chosen_faults(
    parser: argparse.ArgumentParser, listed: str, known: Callable[[str], bool], names: str
) -> list[str]:
    """The faults of a comma-separated ``--faults``; a usage error that lists ``names`` when
    one is not ``known``."""
    faults = [f.strip() for f in listed.split(",") if f.strip()]
    unknown = [f for f in faults if not known(f)]
    if unknown:
        parser.error(f"unknown faults {unknown}; known: {names}")
    return faults


def print_json(result: dict[str, Any]) -> None:
    """The figures as one JSON object, the last line on stdout."""
    print(json.dumps(result, sort_keys=True), flush=True)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation between closest ranks.

    The same definition as numpy's default (``method="linear"``), so figures compare.
    """
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def spread(values: Sequence[float], suffix: str = "") -> dict[str, float | None]:
    """p50, p99 and max of ``values`` (None each when there are none), keys ``p50{suffix}``."""
    keys = (f"p50{suffix}", f"p99{suffix}", f"max{suffix}")
    if not values:
        return dict.fromkeys(keys)
    figures = (percentile(values, 50), percentile(values, 99), max(values))
    return {key: round(value, 3) for key, value in zip(keys, figures, strict=True)}


@dataclass(frozen=True)
class Summary:
    """Latency figures of one series, in milliseconds."""

    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float


def summarize_ns(samples_ns: Sequence[int]) -> Summary:
    """Summarize latencies measured in nanoseconds (``time.perf_counter_ns``) as ms."""
    return summarize_ms([s / NS_PER_MS for s in samples_ns])


def summarize_ms(samples_ms: Sequence[float]) -> Summary:
    """Summarize durations already in milliseconds (e.g. failover times)."""
    if not samples_ms:
        raise ValueError("summary of no samples")
    ms = [float(s) for s in samples_ms]
    return Summary(
        count=len(ms),
        p50_ms=percentile(ms, 50),
        p90_ms=percentile(ms, 90),
        p99_ms=percentile(ms, 99),
        mean_ms=sum(ms) / len(ms),
        min_ms=min(ms),
        max_ms=max(ms),
    )


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> str:
    """A plain-text table. ``align`` has one letter per column, ``l`` or ``r``; by default
    the first column is left-aligned and the others right-aligned.

    Floats are shown with three decimals; everything else with ``str``.
    """
    if align is None:
        align = "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers) or set(align) - {"l", "r"}:
        raise ValueError(f"align needs one of 'l'/'r' per column, got {align!r}")

    def cell(value: object) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    text = [[cell(v) for v in row] for row in rows]
    for row in text:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns")
    widths = [max([len(h), *(len(r[i]) for r in text)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(widths[i]) if align[i] == "l" else c.rjust(widths[i])
            for i, c in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(r) for r in text)])


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> None:
    print(format_table(headers, rows, align))


# -- machine facts ----------------------------------------------------------------------


@dataclass(frozen=True)
class MachineFacts:
    cpu_model: str
    cores: int | None  # logical CPUs usable by this process
    memory_gib: float | None
    python: str
    java: str
    kernel: str

    def line(self) -> str:
        """One short line for the top or bottom of a benchmark's output."""
        cores = f"{self.cores} cores" if self.cores is not None else "? cores"
        memory = f"{self.memory_gib:.1f} GiB" if self.memory_gib is not None else "? GiB"
        return (
            f"machine: {self.cpu_model}, {cores}, {memory}; python {self.python}; "
            f"java {self.java}; kernel {self.kernel}"
        )

    def as_dict(self) -> dict[str, Any]:
        facts = asdict(self)
        if self.memory_gib is not None:
            facts["memory_gib"] = round(self.memory_gib, 1)
        return facts


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for raw in f:
                key, _, value = raw.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model"):
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for raw in f:
                if raw.startswith("MemTotal:"):
                    return int(raw.split()[1]) / (1024 * 1024)  # kB -> GiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def java_version(java: str = "java") -> str:
    """``java -version``'s version string (it prints to stderr), or ``"none"``."""
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    output = done.stderr or done.stdout
    match = re.search(r'version "([^"]+)"', output)
    if match:
        return match.group(1)
    first = output.strip().splitlines()
    return first[0] if first else "unknown"


def machine_facts() -> MachineFacts:
    return MachineFacts(
        cpu_model=cpu_model(),
        cores=usable_cores(),
        memory_gib=memory_gib(),
        python=platform.python_version() + (" (debug)" if hasattr(sys, "gettotalrefcount") else ""),
        java=java_version(),
        kernel=platform.release(),
    )


# -- processes and ports (shared by benchmarks that start replicas) ---------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (``devtools.zklocate``)."""
    return free_ports(1)[0]


def pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --`` when available: a child dies with us even on kill -9.

    Exec'ing through setpriv (same pid) rather than a ``preexec_fn``, which would run
    Python in a forked child of a process full of gRPC threads.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


def load_1min() -> float:
    """The 1-minute load average, NaN where the platform has none."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


@dataclass(frozen=True)
class BenchRun:
    """One run of a bench that starts ZooKeeper and replicas: its mode, and when and under
    what load it began. Made as the run starts; its footer ends the run's report."""

    quick: bool
    began: float
    load_start: float

    @classmethod
    def start(cls, *, quick: bool) -> BenchRun:
        return cls(quick=quick, began=time.monotonic(), load_start=load_1min())

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    def footer(self) -> dict[str, Any]:
        """Print the machine, the load at start and end and the wall time, after a blank
        line; return the same figures under the JSON keys every such bench reports."""
        elapsed_s = time.monotonic() - self.began
        facts = machine_facts()
        print()
        load_end = load_1min()
        print(facts.line())
        print(
            f"load average (1 min) {self.load_start:.2f} at start, {load_end:.2f} at end; "
            f"wall time {elapsed_s:.1f} s including ZooKeeper and replica startup"
        )
        return {
            "quick": self.quick,
            "machine": facts.as_dict(),
            "load_1min_start": round(self.load_start, 2),
            "load_1min_end": round(load_end, 2),
            "wall_s": round(elapsed_s, 2),
        }


@contextmanager
def kept_on_failure(prefix: str, bench: str) -> Iterator[Path]:
    """A fresh folder for the replicas' logs: removed when the block succeeds, kept (and
    named on stderr) when it fails, so the logs can be read."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield workdir
    except BaseException:
        print(f"bench/{bench}: replica logs kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)


def vm_rss_mib(pid: int) -> float | None:
    """A process's resident set (``VmRSS`` in ``/proc/<pid>/status``) in MiB; None if unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for raw in f:
                if raw.startswith("VmRSS:"):
                    return int(raw.split()[1]) / 1024  # kB -> MiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used so far, from ``/proc/<pid>/stat``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
        # after the command name: state ppid pgrp session tty tpgid flags minflt cminflt
        # majflt cmajflt utime stime
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
