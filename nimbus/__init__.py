"""The Nimbus service, the top of the stack, in three rooms and a few shared modules.

- ``nimbus.cli``: the ``nimbus`` command, one ``cmd_*`` module per subcommand.
- ``nimbus.server``: one replica's process, the daemon that wires it and its edges
  (gRPC servicer and interceptors, forwarding, security, the web UI).
- ``nimbus.duties``: what the leader does, fenced (submission, lifecycle, scheduler,
  sweeper, failure log).

Shared: the client library (``client``, with ``discovery``), ``config``, ``metrics``,
``views`` and ``call_metadata``. It may import every layer below (``pipeline``, ``leader``,
``code_sync``, ``fencing``, ``cluster``) and never ``devtools``: the developer subcommands
join the CLI through the ``nimbus.commands`` entry points. ``pyproject.toml``'s import
contracts keep the rooms in order: cli > server > duties, and the shared modules import
none of them.
"""

from cluster import __version__

__all__ = ["__version__"]
