"""Leadership: queue on the ZooKeeper lock, take office only with all code, discovery.

Holds the elector (the kazoo lock recipe, the code gate and the lease), the replica
registry, the watch-fed leader cache and the health service. It imports ``fencing`` and
``cluster`` only; never ``code_sync`` (the code gate is a callable handed in by the daemon),
``pipeline`` or ``nimbus``.
"""
