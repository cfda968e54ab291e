"""Label this replica's own pod ``nimbus-role=leader|follower`` through the Kubernetes API.

Optional (``--k8s-pod NAME``): a leader-only Service can then select the leader, as
Patroni does, for clients that cannot follow redirects. The label follows the leader's
claim (DESIGN item 8: a fresh acknowledged beat, not only the term), so a leader cut off
from ZooKeeper stops being selected within its claim lease L, not when it learns it was
deposed. A patch runs on a thread of its own (the elector's
callbacks never wait on HTTP), a failed patch is retried with backoff and logged, and
only the newest role is ever sent. Readiness still gates the Service, so a pod whose
label is stale after a crash receives nothing until it is ready and has relabelled.
"""

from __future__ import annotations

import json
import logging
import os
import random
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cluster.errors import ConfigError
from cluster.threads import guarded_thread

log = logging.getLogger(__name__)

LABEL = "nimbus-role"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class PodApi:
    """Where and how to reach the API server from inside a pod."""

    base_url: str
    namespace: str
    pod: str
    token_file: Path
    ca_file: Path

    @classmethod
    def in_cluster(cls, pod: str, account: Path = SERVICE_ACCOUNT) -> PodApi:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token, ca, ns = account / "token", account / "ca.crt", account / "namespace"
        if not host or not token.is_file() or not ca.is_file() or not ns.is_file():
            raise ConfigError(
                f"--k8s-pod {pod!r} needs to run inside a Kubernetes pod with a service "
                f"account (KUBERNETES_SERVICE_HOST and {account}/token, ca.crt, namespace)"
            )
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", ns.read_text().strip(), pod, token, ca)

    def request(self, role: str) -> urllib.request.Request:
        """The JSON merge patch that sets the role label on our own pod."""
        body = json.dumps({"metadata": {"labels": {LABEL: role}}}).encode()
        return urllib.request.Request(
            f"{self.base_url}/api/v1/namespaces/{self.namespace}/pods/{self.pod}",
            data=body,
            method="PATCH",
            headers={
                "Content-Type": "application/merge-patch+json",
                # Re-read each time: projected service account tokens are rotated.
                "Authorization": f"Bearer {self.token_file.read_text().strip()}",
            },
        )


class PodLabeler:
    """Keeps the pod's role label equal to the newest role it was given."""

    def __init__(self, api: PodApi, *, timeout: float = 5.0) -> None:
        self._api = api
        self._timeout = timeout
        self._wanted: str | None = None
        self._sent: str | None = None
        self._changed = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="pod-label", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def set_role(self, role: str) -> None:
        with self._changed:
            if role == self._wanted:
                return
            self._wanted = role
            self._changed.notify_all()

    @property
    def wanted(self) -> str | None:
        """The newest role asked for (sent, or on its way)."""
        with self._changed:
            return self._wanted

    def follow_claim(
        self, is_leader: Callable[[], bool], stop: threading.Event, interval: float
    ) -> threading.Thread:
        """Every ``interval``, ask for ``leader`` while ``is_leader()`` holds (the claim),
        else ``follower``; until ``stop`` is set."""

        def body() -> None:
            while not stop.wait(interval):
                self.set_role("leader" if is_leader() else "follower")

        thread = guarded_thread("pod-role", body, stop)
        thread.start()
        return thread

    def stop(self, flush: float = 2.0) -> None:
        """Give the last role ``flush`` seconds to reach the API server, then stop."""
        with self._changed:
            self._changed.wait_for(lambda: self._sent == self._wanted, timeout=flush)
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout=self._timeout + 1)

    def _run(self) -> None:
        delay = 0.5
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._stopping or self._wanted != self._sent)
                if self._stopping:
                    return
                role = self._wanted
            assert role is not None
            try:
                self._patch(role)
            except (OSError, urllib.error.URLError) as e:
                log.warning("could not label pod %s %s=%s: %s", self._api.pod, LABEL, role, e)
                with self._changed:
                    self._changed.wait(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, 30.0)
                continue
            delay = 0.5
            log.info("labelled pod %s %s=%s", self._api.pod, LABEL, role)
            with self._changed:
                self._sent = role
                self._changed.notify_all()

    def _patch(self, role: str) -> None:
        context = ssl.create_default_context(cafile=str(self._api.ca_file))
        with urllib.request.urlopen(
            self._api.request(role), timeout=self._timeout, context=context
        ) as reply:
            reply.read()
