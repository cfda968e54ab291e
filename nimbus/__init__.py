"""The Nimbus daemon: config, the ZooKeeper and gRPC factories, the server and the CLI.

Also ships the embedded ZooKeeper launcher and the fault proxy used by tests and by the
one-command local cluster.
"""

__version__ = "0.1.0"
