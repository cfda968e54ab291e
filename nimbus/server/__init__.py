"""One replica's process: the daemon that wires it, and its edges.

``daemon`` builds a replica (ZooKeeper session, code sync, elector, duties, servers) and
stops it; ``servicer`` is its gRPC face (discovery answered from memory, redirects from
followers, ``forward`` relaying a leader-only call for a client cut from the leader);
``grpc_*`` the interceptors every call passes; ``topology_api`` and ``topologies`` the
topology calls and read views; ``security`` the server's auth, TLS and input limits;
``ui`` the read-only web UI; ``zkcheck``, ``podlabel`` and ``malloc`` process details.

It stands above the leader's duties (``nimbus.duties``) and below the CLI.
"""
