"""The gRPC call metadata keys the client and the replicas agree on.

A follower's redirect names the leader and its term in trailing metadata; a client asks
a follower to forward a leader-only call, and the follower marks what it forwarded so it
is never forwarded twice. Both ends import these names from here: the client library
never imports the server to learn them.
"""

from __future__ import annotations

#: A redirect's trailing metadata: the leader's address and its epoch.
LEADER_METADATA_KEY = "nimbus-leader"
LEADER_EPOCH_METADATA_KEY = "nimbus-leader-epoch"
#: ``1`` on a leader-only call a follower should forward (``nimbus.server.forward``).
FORWARD_METADATA_KEY = "nimbus-forward"
#: Set by the follower that forwarded a call: it is never forwarded again.
FORWARDED_BY_METADATA_KEY = "nimbus-forwarded-by"
