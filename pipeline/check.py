"""``python -m pipeline.check PACKAGE``: load a package's topology and validate it.

Run by the leader in a child process with time and memory limits before it acknowledges
a submission (``nimbus.duties.package_check``): the package is user code, so ``build()`` may
loop, allocate without bound or crash, and none of that may reach the leader.

With ``--analyse``, a topology with SQL text (``Where``, ``Select``, ``Window``,
``Branch``) also has it resolved by Spark's analyzer (``pipeline.analysis``), so a
misspelt function or a missing column is refused here rather than in a worker. A JVM
cannot start under the limits, so when limits are given the session starts first, before
them and before any user code, and the limits are raised by what starting it took (user
code gets the same room as in a check without Spark); without limits it starts only once
the loaded topology turns out to need it. The leader runs the check without ``--analyse``
first and again with it only when the first verdict says ``needs_analysis``, so a package
without SQL text, or one already invalid, never pays for a JVM.

Prints one JSON line: ``{"ok": true, "components": [...], "analysed": ...,
"needs_analysis": ...}`` with the graph (name, kind, parallelism, inputs with grouping
and fields) for the UI and ``describe``, or ``{"ok": false, "component": ..., "error":
...}``. Exit status 0 or ``EXIT_INVALID`` with a verdict; any other status means the
check itself failed (killed by a limit, crashed, or ``EXIT_NO_SPARK``: Spark could not
start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.errors import PackageError, TopologyError
from pipeline.graph import Topology

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Where a check that analyses gets its session (started at the first call), or None.
SessionSource = Callable[[], "SparkSession"]


def describe_graph(topology: Topology) -> list[dict[str, Any]]:
    """The topology's components as plain data (what the UI draws)."""
    return [
        {
            "name": spec.name,
            "kind": spec.kind,
            "parallelism": spec.parallelism,
            "inputs": [
                {
                    "source": g.source,
                    "grouping": g.kind.name.lower(),
                    "fields": list(g.fields),
                }
                for g in spec.inputs
            ],
        }
        for spec in topology
    ]


def check(
    package: str, config: dict[str, Any] | None = None, session: SessionSource | None = None
) -> dict[str, Any]:
    """The verdict on a package; its SQL text is resolved only when ``session`` is given."""
    # Imported here: pyspark (under the compiler) is only needed once a package is given.
    from pipeline.analysis import analyse, needs_analysis
    from pipeline.compiler import validate
    from pipeline.package import load_topology

    with tempfile.TemporaryDirectory(prefix="nimbus-check-") as unpack_to:
        try:
            topology = load_topology(package, unpack_to=unpack_to, config=config)
            validate(topology)
            needed = needs_analysis(topology)
            if needed and session is not None:
                analyse(topology, session())
        except TopologyError as e:
            # The component is its own key: the message need not name it again.
            return {"ok": False, "component": e.component, "error": e.problem}
        except PackageError as e:
            if isinstance(e.__cause__, MemoryError):
                return {
                    "ok": False,
                    "component": None,
                    "error": "build() ran out of memory under the validation limit "
                    "(does it allocate without bound?)",
                }
            return {"ok": False, "component": None, "error": str(e)}
        return {
            "ok": True,
            "components": describe_graph(topology),
            "analysed": needed and session is not None,
            "needs_analysis": needed,
        }


#: The exit status of a check that ran and found the topology invalid (the verdict says why).
EXIT_INVALID = 3
#: The exit status of a check that needed Spark for its analysis and could not start it.
EXIT_NO_SPARK = 4


def confine(memory_mib: int, cpu_s: int, max_file_bytes: int) -> None:
    """Limit this process before any user code runs (the caller cannot: a ``preexec_fn``
    in a process with gRPC threads was seen to abort the child)."""
    memory = memory_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _held_mib() -> int:
    """This process's address space now (Linux), to measure what starting Spark took."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)


def _used_cpu_s() -> int:
    """CPU seconds this process has used so far (``RLIMIT_CPU`` counts those too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return int(usage.ru_utime + usage.ru_stime + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.check", description="validate a topology package"
    )
    parser.add_argument("package")
    parser.add_argument("--memory-mib", type=int, default=0, help="address-space limit")
    parser.add_argument("--cpu-s", type=int, default=0, help="CPU-time limit")
    parser.add_argument("--max-file-bytes", type=int, default=256 * 1024 * 1024)
    parser.add_argument(
        "--config-json", default="{}", help="the topology config build(config) is given"
    )
    parser.add_argument(
        "--analyse",
        action="store_true",
        help="resolve SQL expressions with Spark (with limits, Spark starts before them)",
    )
    args = parser.parse_args(argv)
    try:
        config = json.loads(args.config_json)
    except json.JSONDecodeError as e:
        parser.error(f"--config-json is not valid JSON: {e}")
    if not isinstance(config, dict):
        parser.error("--config-json must be a JSON object")
    # Imported here, as in check(): the leader imports this module for its exit statuses.
    from pipeline.analysis import AnalysisUnavailable, analysis_session

    confined = args.memory_mib > 0 and args.cpu_s > 0
    with contextlib.ExitStack() as resources:
        session: SessionSource | None = None
        try:
            memory, cpu = args.memory_mib, args.cpu_s
            if args.analyse:
                session = _lazy(lambda: resources.enter_context(analysis_session()))
            if session is not None and confined:
                # A JVM cannot start under the limits: start it now, and leave user code
                # the same room it has in a check without Spark.
                held, used = _held_mib(), _used_cpu_s()
                session()
                memory += _held_mib() - held
                cpu += _used_cpu_s() - used
            if confined:
                confine(memory, cpu, args.max_file_bytes)
            verdict = check(args.package, config, session)
        except AnalysisUnavailable as e:
            print(f"\n{e}", flush=True)
            return EXIT_NO_SPARK
    sys.stdout.flush()
    # The verdict is the last line: whatever build() printed comes before it, and the
    # analysis JVM (which shares this output) has exited.
    print("\n" + json.dumps(verdict), flush=True)
    return 0 if verdict["ok"] else EXIT_INVALID


def _lazy(start: SessionSource) -> SessionSource:
    """``start`` run at the first call only; later calls return its session."""
    started: list[SparkSession] = []

    def session() -> SparkSession:
        if not started:
            started.append(start())
        return started[0]

    return session


if __name__ == "__main__":
    raise SystemExit(main())
