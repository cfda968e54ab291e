"""The ``nimbus`` command: one entry point, one module per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nimbus import (
    cmd_dev,
    cmd_leader,
    cmd_serve,
    cmd_supervisor,
    cmd_topology,
    cmd_zookeeper,
)
from nimbus.errors import NimbusError
from nimbus.security import client as client_security


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nimbus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cmd_serve.register(sub)
    cmd_supervisor.register(sub)
    cmd_leader.register(sub)
    cmd_topology.register(sub)
    cmd_dev.register(sub)
    cmd_zookeeper.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "token_file") and hasattr(args, "tls"):  # a client command
        try:
            client_security.set_default(client_security.from_args(args))
        except NimbusError as e:
            print(f"nimbus {args.command}: {e}", file=sys.stderr)
            return 2
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
