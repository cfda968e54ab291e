"""Fixtures for what only root can do: kernel faults (network namespaces, iptables, a
process's ports cut through its cgroup), fsyncs slowed by strace, small tmpfs mounts.

Each one skips the test where the machine cannot do it, and carries the ``root`` tier
marker (``tests.tiers``): a test reaches these tools through its fixture, so it cannot
use one and stay in the fast tier. The session-scoped ones only check and hand the tool
over, so module-scoped fixtures can ask for them too.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devtools.netns import LoopbackPortCut, available
from tests.chaos import slow_disk
from tests.chaos.kernel_cluster import KernelCluster
from tests.chaos.kernel_ensemble import KernelEnsemble
from tests.tiers import needs

Mount = Callable[[Path, str], Path]


@pytest.fixture(scope="session")
@needs("root")
def kernel_cluster() -> type[KernelCluster]:
    """Replicas in network namespaces whose links the kernel cuts."""
    why = available()
    if why is not None:
        pytest.skip(f"kernel faults: {why}")
    return KernelCluster


@pytest.fixture(scope="session")
@needs("root")
def port_cut() -> type[LoopbackPortCut]:
    """A process's loopback ports cut from its peers (through its cgroup)."""
    why = available(cgroups=True)
    if why is not None:
        pytest.skip(f"kernel cut: {why}")
    return LoopbackPortCut


@pytest.fixture(scope="session")
@needs("root")
def kernel_ensemble(port_cut: type[LoopbackPortCut]) -> type[KernelEnsemble]:
    """Replicas in network namespaces on a 3-server ensemble whose servers' ports are cut."""
    return KernelEnsemble


@pytest.fixture(scope="session")
@needs("root")
def fsync_stall() -> type[slow_disk.FsyncStall]:
    """Every fsync of chosen processes slowed (strace attached to them)."""
    why = "not root" if os.geteuid() != 0 else slow_disk.available()
    if why is not None:
        pytest.skip(f"the slow disk needs root and strace: {why}")
    return slow_disk.FsyncStall


@pytest.fixture
@needs("root")
def tmpfs() -> Iterator[Mount]:
    """``mount(folder, size)``: a tmpfs of ``size`` (mount's ``size=``) on an existing
    folder; unmounted (lazily: a process may still hold a file) when the test ends."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted: list[Path] = []

    def mount(folder: Path, size: str) -> Path:
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except OSError as e:
            pytest.skip(f"cannot run mount: {e}")
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], check=False, timeout=30)
