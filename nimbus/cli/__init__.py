"""The nimbus command: one entry point, one module per subcommand.

``nimbus`` (the console script) and ``python -m nimbus.cli`` both run ``main``. The
service's own subcommands are the ``cmd_*`` modules here; others (``nimbus dev`` and
``nimbus zookeeper`` from ``devtools``) register through the ``nimbus.commands``
entry-point group, so the daemon never imports the developer tooling that stands above it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

# Before gRPC is first imported: its core logs every failed TLS handshake at INFO on
# stderr (a screenful per call against a mismatched port), over the one line the client
# says. Errors still show; GRPC_VERBOSITY set by the user wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from cluster.errors import NimbusError
from cluster.security import client as client_security

#: Entry-point group of extra subcommands: each names a ``register(subparsers)`` function.
COMMANDS_GROUP = "nimbus.commands"


def build_parser() -> argparse.ArgumentParser:
    # Imported here, not when the package is: ``python -m nimbus.cli.cmd_supervisor`` must
    # not find its module already imported by its package (runpy would run a second copy).
    from nimbus.cli import cmd_leader, cmd_prestop, cmd_serve, cmd_supervisor, cmd_topology

    parser = argparse.ArgumentParser(prog="nimbus", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmd_serve.register(sub)
    cmd_supervisor.register(sub)
    cmd_leader.register(sub)
    cmd_prestop.register(sub)
    cmd_topology.register(sub)
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry.load()(sub)
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
