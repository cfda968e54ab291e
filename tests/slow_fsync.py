"""A disk made slow for some processes: every fsync and fdatasync they make returns only
after a delay, by strace's syscall fault injection (``-e inject=...:delay_exit=``).

Needs root (ptrace of processes the tests started) and strace, which
``deploy/local/netfilter.sh`` installs; ``unavailable()`` says why not here. strace attaches
to every thread (``-f -p``) and detaches cleanly when it is terminated.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path


def unavailable() -> str | None:
    """None when fsyncs can be slowed here, else why not."""
    if os.geteuid() != 0:
        return "not root (strace attaches to the ZooKeeper servers)"
    if shutil.which("strace") is None:
        return "strace not installed (deploy/local/netfilter.sh installs it)"
    return None


def _all_threads_traced(pid: int) -> bool:
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            tracer = next(
                line for line in status.read_text().splitlines() if line.startswith("TracerPid:")
            )
        except (OSError, StopIteration):
            continue  # the thread exited meanwhile
        if tracer.split()[1] == "0":
            return False
    return True


@contextlib.contextmanager
def slow_fsync(pids: list[int], delay: float, attach_timeout: float = 30.0) -> Iterator[None]:
    """Within the block every fsync of ``pids`` (all their threads) takes ``delay`` more."""
    usec = int(delay * 1_000_000)
    argv = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync,fsync"]
    argv += ["-e", f"inject=fdatasync,fsync:delay_exit={usec}"]
    tracers = [
        subprocess.Popen(
            [*argv, "-p", str(pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for pid in pids
    ]
    try:
        deadline = time.monotonic() + attach_timeout
        while not all(_all_threads_traced(pid) for pid in pids):
            failed = [t for t in tracers if t.poll() is not None]
            if failed or time.monotonic() > deadline:
                errors = b"; ".join(t.stderr.read() for t in failed if t.stderr is not None)
                raise RuntimeError(f"strace did not attach: {errors.decode(errors='replace')}")
            time.sleep(0.05)
        yield
    finally:
        for tracer in tracers:
            tracer.terminate()  # detaches: the processes run on at full speed
        for tracer in tracers:
            try:
                tracer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                tracer.kill()
                tracer.wait()
