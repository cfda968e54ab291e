"""Per-topology credential nodes, readable only by that topology's identity (and us).

Storm's ``mk-topo-only-acls``: each topology gets a ZooKeeper digest identity of its own
(user = topology id, a random password) and ``/credentials/<topology-id>`` holding it,
with an ACL that gives the service everything and the topology READ, never anyone else,
even when the rest of the tree is world-readable. A worker handed that identity can read
its own credentials and no other topology's. The leader keeps the set in step with
``/storms`` (fenced); with ZooKeeper auth off there are no identities and no nodes.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import make_digest_acl

from cluster.errors import NimbusError
from cluster.paths import Paths
from cluster.reads import storm_readable
from cluster.security.zkauth import ZkAuth
from fencing import (
    Create,
    Delete,
    FencedWriter,
    WriteConflictError,
    ensure_folders,
    run_duty,
)

log = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,256}$")  # a digest user name has no ':'


class CredentialsError(NimbusError):
    """A credentials node is missing, unreadable or damaged."""


@dataclass(frozen=True)
class TopologyCredentials:
    topology_id: str
    password: str = field(repr=False)

    @property
    def auth(self) -> ZkAuth:
        """The topology's own identity, to authenticate a worker's ZooKeeper client."""
        return ZkAuth(self.topology_id, self.password)

    def encode(self) -> bytes:
        return json.dumps({"topology_id": self.topology_id, "password": self.password}).encode()

    @classmethod
    def decode(cls, data: bytes) -> TopologyCredentials:
        try:
            value = json.loads(data)
            return cls(str(value["topology_id"]), str(value["password"]))
        except (ValueError, TypeError, KeyError) as e:
            raise CredentialsError(f"damaged credentials record ({type(e).__name__})") from e


def new_credentials(topology_id: str) -> TopologyCredentials:
    return TopologyCredentials(topology_id, secrets.token_urlsafe(32))


def create_op(paths: Paths, service: ZkAuth, creds: TopologyCredentials) -> Create:
    """The node: service ALL, the topology READ, nobody else anything."""
    reader = make_digest_acl(creds.topology_id, creds.password, read=True)
    return Create(
        paths.credential(creds.topology_id),
        creds.encode(),
        acl=tuple(service.private_acl(reader)),
    )


def read_credentials(client: KazooClient, paths: Paths, topology_id: str) -> TopologyCredentials:
    """What a supervisor (service identity) or the topology itself reads."""
    try:
        data, _ = client.get(paths.credential(topology_id))
    except NoNodeError as e:
        raise CredentialsError(f"no credentials for topology {topology_id!r}") from e
    return TopologyCredentials.decode(data)


class CredentialsDuty:
    """Leader-only: one credentials node per topology in ``/storms``, none for the gone."""

    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        service: ZkAuth,
        writer: FencedWriter,
        *,
        storms: Callable[[], Mapping[str, object]],
        interval: float,
    ) -> None:
        self._client = client
        self._paths = paths
        self._service = service
        self._writer = writer
        self._storms = storms
        self._interval = interval
        self._refused: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="credentials", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def run_once(self) -> list[str]:
        """One pass; returns the changes made, in words."""
        folder = self._paths.credentials
        ensure_folders(self._client, [folder])
        have = set(self._client.get_children(folder))
        want = set(self._storms())
        changes: list[str] = []
        for topology_id in sorted(want - have):
            if not _SAFE_ID.match(topology_id):  # not an id we made: no identity for it
                if topology_id not in self._refused:
                    self._refused.add(topology_id)
                    log.warning("no credentials for %r: not a topology id", topology_id)
                continue
            try:
                self._writer.batch(
                    [create_op(self._paths, self._service, new_credentials(topology_id))]
                )
            except WriteConflictError as e:  # e.g. made by a previous pass we did not see
                log.info("credentials of %s not created: %s", topology_id, e)
                continue
            changes.append(f"credentials of {topology_id} created")
        for topology_id in sorted(have - want):
            if storm_readable(self._client, self._paths, topology_id):
                continue  # in /storms but not in our view yet (a read lost to a disconnect)
            self._writer.batch([Delete(self._paths.credential(topology_id))])
            changes.append(f"credentials of {topology_id} removed")
        return changes

    def _run(self) -> None:
        run_duty(
            "credentials duty", self._writer.token, self.run_once, interval=self._interval, log=log
        )
