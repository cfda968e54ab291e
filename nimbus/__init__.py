"""The Nimbus daemon and its edges, the top of the service.

Config, the daemon that wires a replica, the gRPC servicer and the client library that
follows the leader, lifecycle, submission, the scheduler, the web UI, metrics, server-side
security and the ``nimbus`` CLI. It may import every layer below (``pipeline``, ``leader``,
``code_sync``, ``fencing``, ``cluster``) and never ``devtools``: the developer subcommands
join the CLI through the ``nimbus.commands`` entry points.
"""

from cluster import __version__

__all__ = ["__version__"]
