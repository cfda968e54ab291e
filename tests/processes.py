"""Processes a test starts: stopping one (ask, wait, then kill what did not listen), and a
Python child killed when its block ends.

Invariant: the process is reaped when these return, whatever it did, so no test leaves a
zombie or a live child behind for the next one.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, AnyStr

REPO = Path(__file__).resolve().parent.parent


def stop_process(
    proc: subprocess.Popen[AnyStr], timeout: float, signum: int = signal.SIGTERM
) -> int:
    """Send ``signum`` (and SIGCONT: a stopped process cannot act on it), wait up to
    ``timeout`` seconds, SIGKILL after that. Returns the exit code (-9 when killed)."""
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signum)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def nimbus_cli(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``nimbus ARGS...`` as a user runs it: its own process from the repository root, with
    ``env`` over this one's; output captured as text, the exit code left to the caller."""
    return subprocess.run(
        [sys.executable, "-m", "nimbus.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )


def nimbus_dev(*args: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """``nimbus dev ARGS...`` from the repository root, and the queue a daemon thread puts
    its output lines in (stdout and stderr), so a test waits for a line with a deadline
    of its own. The caller stops the process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nimbus.cli", "dev", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout
    assert stdout is not None

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def cli_submit(package: Path, name: str, seeds: str, config_json: str | None = None) -> None:
    """``nimbus submit`` of ``package`` as ``name`` (with ``--config-json`` when given); fails
    the test with the CLI's stderr when it is refused."""
    config = () if config_json is None else ("--config-json", config_json)
    done = nimbus_cli("submit", str(package), "--name", name, *config, "--seeds", seeds)
    assert done.returncode == 0, done.stderr


def cli_topology_id(name: str, seeds: str) -> str:
    """The id of the topology named ``name``, as ``nimbus describe --json`` gives it."""
    described = nimbus_cli("describe", name, "--seeds", seeds, "--json")
    assert described.returncode == 0, described.stderr
    topology_id: str = json.loads(described.stdout)["id"]
    return topology_id


@contextmanager
def python_child(
    *args: str, stdin: bool = False, stderr: int | None = None
) -> Iterator[tuple[subprocess.Popen[str], IO[str]]]:
    """``python ARGS...`` from the repository root, with its stdout as text (and a stdin
    pipe that keeps it open where ``stdin``); SIGKILLed when the block ends (no atexit, no
    finally runs in it) and reaped."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    try:
        yield proc, proc.stdout
    finally:
        proc.kill()
        proc.wait()
