"""Server-side security of a replica: the gRPC auth check, input limits, topology secrets.

``interceptor`` (the server's check of each call), ``server`` (loading the server's TLS,
tokens and ZooKeeper auth), ``limits`` (input size bounds), ``credentials`` (per-topology
nodes). The client side every process shares lives in ``cluster.security``.
"""
