"""Before a pod stops: which replica its leader hands over to (``nimbus prestop``).

A StatefulSet's rolling update replaces pods from the highest ordinal down, whoever
leads. A leader that only released the lock on SIGTERM would pass leadership to the next
in line, most likely a pod still on the old revision and restarted a moment later: one
leader change per old pod. Handing over first to a pod already on the update revision
(its ``controller-revision-hash`` label equals the StatefulSet's ``updateRevision``)
moves leadership once per update; only when the leader is the first pod replaced, with
no pod updated yet, does it move twice (the next in line, then onto an updated pod).

The choice is a pure function of what the Kubernetes API lists (``choose``, tested
without a cluster); ``read_rollout`` is the thin shell that asks the API server, with
the pod's service account (rbac.yaml: get and list pods, get the StatefulSet).
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nimbus.server.podlabel import PodApi

REVISION_LABEL = "controller-revision-hash"
_ORDINAL = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class Pod:
    """What the choice needs of one pod of the StatefulSet."""

    name: str
    revision: str  # its controller-revision-hash label
    ready: bool
    deleting: bool  # a deletionTimestamp: on its way out
    ip: str = ""

    @property
    def ordinal(self) -> int:
        found = _ORDINAL.search(self.name)
        return int(found.group(1)) if found else -1

    @classmethod
    def from_api(cls, item: dict[str, Any]) -> Pod:
        """From one item of the API's pod list (or a pod GET)."""
        meta, status = item.get("metadata", {}), item.get("status", {})
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        return cls(
            name=meta.get("name", ""),
            revision=(meta.get("labels") or {}).get(REVISION_LABEL, ""),
            ready=ready,
            deleting=bool(meta.get("deletionTimestamp")),
            ip=status.get("podIP", ""),
        )


@dataclass(frozen=True)
class Rollout:
    """The StatefulSet's pods and the revision an update brings them to."""

    update_revision: str
    pods: tuple[Pod, ...]


@dataclass(frozen=True)
class Choice:
    """Hand over to ``to``; empty: to the next in line (the server's choice)."""

    to: str
    why: str


def replica_of(pod: Pod, replicas: Sequence[str]) -> str | None:
    """The registered replica id (``host:port``) ``pod`` serves: its host is the pod's DNS
    name (``<pod>.<service>...``, as the StatefulSet advertises) or the pod's IP."""
    for replica in replicas:
        host = replica.rsplit(":", 1)[0].strip("[]")
        if host.split(".", 1)[0] == pod.name or (pod.ip and host == pod.ip):
            return replica
    return None


def choose(rollout: Rollout, own_pod: str, replicas: Sequence[str]) -> Choice:
    """A ready replica on the update revision, other than this pod; the one updated first
    (the highest ordinal: it has been serving longest). None: the next in line."""
    if not rollout.update_revision:
        return Choice("", "the StatefulSet names no update revision: the next in line")
    updated = sorted(
        (
            p
            for p in rollout.pods
            if p.name != own_pod
            and p.revision == rollout.update_revision
            and p.ready
            and not p.deleting
        ),
        key=lambda p: p.ordinal,
        reverse=True,
    )
    for pod in updated:
        replica = replica_of(pod, replicas)
        if replica is not None:
            return Choice(replica, f"{pod.name} runs the update revision {pod.revision}")
    return Choice("", "no other ready pod runs the update revision yet: the next in line")


def _get(api: PodApi, path: str, timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{api.base_url}{path}",
        headers={"Authorization": f"Bearer {api.token_file.read_text().strip()}"},
    )
    context = ssl.create_default_context(cafile=str(api.ca_file))
    with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:
        found: dict[str, Any] = json.loads(reply.read())
    return found


def read_rollout(api: PodApi, timeout: float = 5.0) -> Rollout:
    """This pod's StatefulSet (its owner), its update revision, and its pods (by the
    StatefulSet's selector). Raises ``OSError`` (or ``ValueError``) when the API cannot
    tell: the caller then hands over to the next in line."""
    ns = urllib.parse.quote(api.namespace)
    own = _get(api, f"/api/v1/namespaces/{ns}/pods/{urllib.parse.quote(api.pod)}", timeout)
    owners = own.get("metadata", {}).get("ownerReferences") or ()
    sts = next((o["name"] for o in owners if o.get("kind") == "StatefulSet"), None)
    if sts is None:
        raise ValueError(f"pod {api.pod} belongs to no StatefulSet")
    found = _get(api, f"/apis/apps/v1/namespaces/{ns}/statefulsets/{sts}", timeout)
    labels = found.get("spec", {}).get("selector", {}).get("matchLabels") or {}
    selector = urllib.parse.quote(",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    listed = _get(api, f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}", timeout)
    return Rollout(
        update_revision=found.get("status", {}).get("updateRevision", ""),
        pods=tuple(Pod.from_api(item) for item in listed.get("items") or ()),
    )
