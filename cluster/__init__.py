"""The cluster core, Storm's ``cluster.clj`` in Python: what every other layer stands on.

Holds the ZooKeeper layout (``paths``, the only place a layout path is built), the
generated API and records (``api``), the error root and the API error (``errors``,
``apierror``), name and id validation (``names``), the kazoo client and gRPC channel
factories with their client-side auth and TLS (``factory``, ``security``), the watch-fed
record cache (``recordcache``) and the shared reads (``reads``). It imports only the
standard library, kazoo, grpc and protobuf: never another package of this project.
"""

__version__ = "0.1.0"
