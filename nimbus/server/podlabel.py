"""Label this replica's own pod ``nimbus-role=leader|follower`` through the Kubernetes API.

Optional (``--k8s-pod NAME``): a leader-only Service can then select the leader, as
Patroni does, for clients that cannot follow redirects. The label follows the leader's
claim (DESIGN item 8: a fresh acknowledged beat, not only the term), so a leader cut off
from ZooKeeper stops being selected within its claim lease L, not when it learns it was
deposed. A patch runs on a thread of its own (the elector's
callbacks never wait on HTTP), a failed patch is retried with backoff and logged, and
only the newest role is ever sent. Readiness still gates the Service, so a pod whose
label is stale after a crash receives nothing until it is ready and has relabelled.

Labelling ``leader`` is an unfenced action taken on a claim (DESIGN item 8), so it must be
over within T_op (``MAX_UNFENCED_ACTION``) of the claim check it was begun under: the
claim is checked again just before each such PATCH (never only when it was asked for),
and the PATCH is cut at T_op from that check, whatever stage it is in (connect, TLS,
request, a reply that dribbles in). A cut PATCH is retried by the loop like any failed
one. What a cut cannot recall is a request the API server already received and applies
later; nothing on this side can. A ``follower`` PATCH ends a claim and nothing counts on
its end, so it keeps the longer ``timeout``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import random
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cluster.errors import ConfigError
from cluster.threads import guarded_thread
from leader.settings import MAX_UNFENCED_ACTION

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

    def __init__(
        self,
        api: PodApi,
        *,
        timeout: float = 5.0,
        claims: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``timeout``: seconds a ``follower`` PATCH may take; a ``leader`` one gets T_op
        from a check of ``claims`` (given here or by ``follow_claim``) just before it."""
        self._api = api
        self._timeout = timeout
        self._claims = claims
        self._clock = clock
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
        else ``follower``; until ``stop`` is set. ``is_leader`` is also the claim checked
        before each ``leader`` PATCH."""
        self._claims = is_leader

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
            checked = self._clock()
            if role == "leader" and self._claims is not None and not self._claims():
                # Asked for while the claim held; it lapsed since. ``follow_claim`` asks
                # for ``leader`` again once it holds again.
                with self._changed:
                    if self._wanted == "leader":
                        self._wanted = "follower"
                continue
            budget = MAX_UNFENCED_ACTION if role == "leader" else self._timeout
            try:
                self._patch(role, deadline=checked + budget)
            except (OSError, urllib.error.URLError, http.client.HTTPException) as e:
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

    def _patch(self, role: str, *, deadline: float) -> None:
        context = ssl.create_default_context(cafile=str(self._api.ca_file))
        send_by(self._api.request(role), context, deadline, self._clock)


def send_by(
    request: urllib.request.Request,
    context: ssl.SSLContext,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Send ``request`` over HTTPS and read the whole reply, all of it over by ``deadline``
    (on ``clock``): the connect waits at most until then, and at the deadline the socket is
    shut whatever is under way. Raises on a status other than 2xx, and on the cut."""
    url = urllib.parse.urlsplit(request.full_url)
    left = deadline - clock()
    if left <= 0 or url.hostname is None:
        raise TimeoutError(f"no time left for {request.get_method()} {request.full_url}")
    target = url.path + (f"?{url.query}" if url.query else "")
    conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=left, context=context)
    try:
        conn.connect()  # the TCP connect and the TLS handshake, each within ``left``
        if clock() >= deadline:  # nothing was sent yet: send nothing late
            raise TimeoutError(f"connected too late for {request.full_url}")
        sock = conn.sock
        cut = threading.Timer(max(0.0, deadline - clock()), _shut, (sock,))
        cut.daemon = True
        cut.start()
        try:
            conn.request(
                request.get_method(),
                target,
                body=request.data,
                headers=dict(request.header_items()),
            )
            reply = conn.getresponse()
            reply.read()
        finally:
            cut.cancel()
        if not 200 <= reply.status < 300:
            raise OSError(f"{request.get_method()} {request.full_url}: HTTP {reply.status}")
    finally:
        conn.close()


def _shut(sock: socket.socket) -> None:
    """Stop every read and write on ``sock`` now (a TLS socket too: its descriptor)."""
    with contextlib.suppress(OSError):  # closed already
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
