"""Stopping a process a test started: ask, wait, then kill what did not listen.

Invariant: the process is reaped when this returns, whatever it did, so no test leaves a
zombie or a live child behind for the next one.
"""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import suppress
from typing import AnyStr


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
