"""Security: ZooKeeper digest auth and ACLs, gRPC TLS and bearer tokens, input limits.

Everything here is off unless configured, so a cluster without these settings behaves as
before. One module per job: ``zkauth`` (ZooKeeper credentials and ACLs), ``tls``
(certificates), ``tokens`` (bearer tokens), ``interceptor`` (the server's check of each
call), ``client`` (what a client or peer presents), ``credentials`` (per-topology nodes).
"""
