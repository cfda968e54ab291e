"""Client-side security shared by every process: what a client, peer or worker presents.

``zkauth`` (ZooKeeper digest credentials and ACLs), ``tls`` (certificates), ``tokens``
(bearer tokens, and the server's token set read from the same files), ``client`` (the
TLS and token a gRPC client or peer presents). Everything is off unless configured.
"""
