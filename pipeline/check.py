"""``python -m pipeline.check PACKAGE``: load a package's topology and validate it, no Spark.

Run by the leader in a child process with time and memory limits before it acknowledges
a submission (``nimbus.package_check``): the package is user code, so ``build()`` may
loop, allocate without bound or crash, and none of that may reach the leader.

Prints one JSON line: ``{"ok": true, "components": [...]}`` with the graph (name, kind,
parallelism, inputs with grouping and fields) for the UI and ``describe``, or
``{"ok": false, "component": ..., "error": ...}``. Exit status 0 for either verdict; any
other status means the check itself failed (killed by a limit, crashed).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from typing import Any

from pipeline.errors import PackageError, TopologyError
from pipeline.graph import Topology


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


def check(package: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    # Imported here: pyspark (under the compiler) is only needed once a package is given.
    from pipeline.compiler import validate
    from pipeline.package import load_topology

    with tempfile.TemporaryDirectory(prefix="nimbus-check-") as unpack_to:
        try:
            topology = load_topology(package, unpack_to=unpack_to, config=config)
            validate(topology)
        except TopologyError as e:
            return {"ok": False, "component": e.component, "error": str(e)}
        except PackageError as e:
            if isinstance(e.__cause__, MemoryError):
                return {
                    "ok": False,
                    "component": None,
                    "error": "build() ran out of memory under the validation limit "
                    "(does it allocate without bound?)",
                }
            return {"ok": False, "component": None, "error": str(e)}
        return {"ok": True, "components": describe_graph(topology)}


#: The exit status of a check that ran and found the topology invalid (the verdict says why).
EXIT_INVALID = 3


def confine(memory_mib: int, cpu_s: int, max_file_bytes: int) -> None:
    """Limit this process before any user code runs (the caller cannot: a ``preexec_fn``
    in a process with gRPC threads was seen to abort the child)."""
    memory = memory_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


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
    args = parser.parse_args(argv)
    try:
        config = json.loads(args.config_json)
    except json.JSONDecodeError as e:
        parser.error(f"--config-json is not valid JSON: {e}")
    if not isinstance(config, dict):
        parser.error("--config-json must be a JSON object")
    if args.memory_mib > 0 and args.cpu_s > 0:
        confine(args.memory_mib, args.cpu_s, args.max_file_bytes)
    verdict = check(args.package, config)
    sys.stdout.flush()
    # The verdict is the last line: whatever build() printed comes before it.
    print("\n" + json.dumps(verdict), flush=True)
    return 0 if verdict["ok"] else EXIT_INVALID


if __name__ == "__main__":
    raise SystemExit(main())
