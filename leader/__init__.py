"""Leadership: queue on the ZooKeeper lock, take office only with all code, discovery.

Holds the elector (kazoo lock recipe plus the code gate and the lease), the replica
registry, the watch-fed leader cache, its gRPC servicer and the client that follows
the leader.
"""
