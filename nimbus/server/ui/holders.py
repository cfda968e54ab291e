"""Which replicas hold which topology's code, from the mirrored ``/code-distributor``.

Kept to one function on purpose: the registration layout may change (one node per
replica instead of one per topology), and only this file should have to follow it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

#: How deep under ``/code-distributor`` the registrations sit (``<topology-id>/<replica>``).
DEPTH = 2


def code_holders(
    nodes: Mapping[str, bytes], digests: Mapping[str, str], live: Collection[str]
) -> dict[str, list[str]]:
    """topology id -> live replicas registered with the topology's current digest.

    ``nodes`` are the mirrored registrations keyed ``<topology-id>/<replica>`` (data: the
    digest held); ``digests`` maps each topology id to the digest it runs; ``live`` are
    the replicas up now (a registration may outlive its replica).
    """
    held: dict[str, list[str]] = {topology_id: [] for topology_id in digests}
    for rel, data in nodes.items():
        topology_id, _, replica = rel.partition("/")
        if (
            topology_id in held
            and replica in live
            and data.decode("ascii", "replace") == digests[topology_id]
        ):
            held[topology_id].append(replica)
    return {topology_id: sorted(replicas) for topology_id, replicas in held.items()}
