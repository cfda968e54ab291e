"""Validate a submitted package's topology in a child process with time and memory limits.

The package is user code: its ``build()`` may loop forever, allocate without bound or
crash the interpreter. The leader runs ``python -m pipeline.check`` on it in its own
session (so the whole process group can be killed); the child limits itself before it
touches the package (no ``preexec_fn``: forking Python code in a process with gRPC
threads was seen to abort the child), with ``RLIMIT_AS`` for memory,
``RLIMIT_CPU`` and a wall-clock deadline for time, ``RLIMIT_FSIZE`` so it cannot fill the
disk, and its output captured in a file of which only the tail is read, so nothing the
package does can hang, exhaust or crash the leader. A verdict comes back as
``PackageInvalid`` naming the component and the problem; a check that could not finish is
``PackageCheckFailed``, also a refusal: a topology nobody could validate is not accepted.

A topology with SQL text (``Where``, ``Select``, ``Window``, ``Branch``) is checked
twice: the first run, without Spark, says whether it needs analysis; only then does a
second run start a small local Spark (before its limits, see ``pipeline.check``) to
resolve every expression against the declared fields, so a misspelt function or a missing
column is refused at submit naming the component. The second run gets ``spark_start_s``
more wall-clock time than ``timeout_s`` for the JVM; the JVM is in the child's process
group, so a check over its time is killed whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.errors import NimbusError
from pipeline.check import EXIT_INVALID, EXIT_NO_SPARK

#: Bytes of the child's output read back (the verdict is its last line).
OUTPUT_TAIL_BYTES = 256 * 1024
#: The largest file the check may write (unpacking is to a temporary folder).
MAX_FILE_BYTES = 256 * 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parent.parent


class PackageInvalid(NimbusError):
    """The topology is malformed; ``component`` names where (None: the package as a whole)."""

    def __init__(self, component: str | None, message: str) -> None:
        self.component = component
        super().__init__(message)


class PackageCheckFailed(NimbusError):
    """The check did not finish: over its time or memory limit, or it crashed."""


@dataclass(frozen=True)
class CheckLimits:
    timeout_s: float = 20.0
    memory_mib: int = 1024
    spark_start_s: float = 40.0
    """Added to ``timeout_s`` for the run that starts Spark: that run took 8-13 s on two
    busy cores here, and a slow start must not refuse a valid topology."""

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"the validation timeout must be positive, got {self.timeout_s}")
        if self.spark_start_s <= 0:
            raise ValueError(
                f"the Spark start allowance must be positive, got {self.spark_start_s}"
            )
        if self.memory_mib < 256:
            raise ValueError(
                f"the validation memory limit must be at least 256 MiB (Python and the "
                f"pipeline API need that much), got {self.memory_mib}"
            )


def check_package(
    package: Path, limits: CheckLimits, config_json: str = "", *, analyse: bool = True
) -> list[dict[str, Any]]:
    """The topology's components (see ``pipeline.check.describe_graph``) when it is valid,
    as ``build(config)`` makes them with the submitted topology config. ``analyse=False``
    skips Spark's analysis of SQL expressions (enough to draw the graph)."""
    verdict = _run_check(package, limits, config_json, analyse=False)
    if analyse and verdict.get("needs_analysis"):
        verdict = _run_check(package, limits, config_json, analyse=True)
    components: list[dict[str, Any]] = verdict.get("components", [])
    return components


def _run_check(
    package: Path, limits: CheckLimits, config_json: str, *, analyse: bool
) -> dict[str, Any]:
    """One sandboxed run of ``python -m pipeline.check``; its verdict when valid."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": tempfile.gettempdir(),
    }
    if "JAVA_HOME" in os.environ:  # how Spark finds Java when it is not on PATH
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    timeout_s = limits.timeout_s + (limits.spark_start_s if analyse else 0.0)
    with (
        tempfile.TemporaryDirectory(prefix="nimbus-check-") as workdir,
        tempfile.TemporaryFile() as out,
    ):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline.check",
                str(package.resolve()),
                "--memory-mib",
                str(limits.memory_mib),
                "--cpu-s",
                str(int(limits.timeout_s) + 1),
                "--max-file-bytes",
                str(MAX_FILE_BYTES),
                "--config-json",
                config_json or "{}",
                *(["--analyse"] if analyse else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            during = " while Spark resolved its SQL expressions" if analyse else ""
            raise PackageCheckFailed(
                f"validating the topology took longer than {timeout_s:g}s{during} "
                "(does build() loop?); the package was refused"
            ) from None
        finally:
            _kill_group(proc)  # anything the package (or Spark) started in the background
        out.seek(max(0, out.seek(0, os.SEEK_END) - OUTPUT_TAIL_BYTES))
        tail = out.read().decode("utf-8", errors="replace")
    return _verdict(status, tail, limits)


def _verdict(status: int, tail: str, limits: CheckLimits) -> dict[str, Any]:
    lines = [line for line in tail.splitlines() if line.strip()]
    verdict: dict[str, Any] | None = None
    if status in (0, EXIT_INVALID) and lines:
        try:
            parsed = json.loads(lines[-1])
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and "ok" in parsed:
            verdict = parsed
    if verdict is None:
        last = lines[-1][-300:] if lines else "no output"
        if status == EXIT_NO_SPARK:
            raise PackageCheckFailed(f"the topology's SQL expressions could not be checked: {last}")
        if status in (-signal.SIGKILL, -signal.SIGXCPU) or "MemoryError" in tail:
            raise PackageCheckFailed(
                f"validating the topology exceeded its limits ({limits.memory_mib} MiB, "
                f"{limits.timeout_s:g}s; does build() allocate without bound?); "
                f"the package was refused: {last}"
            )
        raise PackageCheckFailed(f"validating the topology failed (exit status {status}): {last}")
    if not verdict["ok"]:
        raise PackageInvalid(verdict.get("component"), str(verdict.get("error")))
    return verdict


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
