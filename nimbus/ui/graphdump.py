"""``python -m nimbus.ui.graphdump PACKAGE``: print a package's component graph as JSON.

Run by the UI in a child process: building a topology runs the package's own code
(and imports PySpark), which must never run inside a Nimbus replica, nor block it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile

from pipeline.graph import Topology


def describe(topology: Topology) -> dict[str, object]:
    return {
        "components": [
            {
                "name": spec.name,
                "kind": spec.kind,
                "type": type(spec.component).__name__,
                "parallelism": spec.parallelism,
                "inputs": [
                    {"source": g.source, "grouping": g.kind.value, "fields": list(g.fields)}
                    for g in spec.inputs
                ],
            }
            for spec in topology
        ]
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m nimbus.ui.graphdump PACKAGE.zip", file=sys.stderr)
        return 2
    from pipeline.errors import PipelineError
    from pipeline.package import load_topology

    with tempfile.TemporaryDirectory(prefix="nimbus-graph-") as unpacked:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the package may print
                topology = load_topology(argv[0], unpack_to=unpacked)
        except PipelineError as e:
            print(str(e).splitlines()[0] if str(e) else type(e).__name__, file=sys.stderr)
            return 1
        print(json.dumps(describe(topology)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
