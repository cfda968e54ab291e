"""A replica's security settings, loaded from its config at start: fail before serving.

One object so the daemon wires ZooKeeper auth, TLS, the token check and what the replica
presents to its peers (code downloads) from the same files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import grpc

from cluster.errors import ConfigError
from cluster.security.client import ClientSecurity
from cluster.security.tls import ClientTls, ServerTls, load_server_tls, read_pem
from cluster.security.tokens import TokenSet, load_token_set
from cluster.security.zkauth import ZkAuth, load_zk_auth
from nimbus.server.security.interceptor import AuthInterceptor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSecurity:
    zk_auth: ZkAuth | None = None
    tls: ServerTls | None = None
    tokens: TokenSet | None = None
    auth_reads: bool = False
    peer: ClientSecurity = field(default_factory=ClientSecurity)

    def interceptors(self) -> list[grpc.ServerInterceptor[Any, Any]]:
        if self.tokens is None:
            return []
        return [AuthInterceptor(self.tokens, auth_reads=self.auth_reads)]


def load_server_security(
    *,
    zk_auth_file: str = "",
    zk_world_readable: bool = False,
    tls_cert: str = "",
    tls_key: str = "",
    tls_client_ca: str = "",
    tls_ca: str = "",
    tls_server_name: str = "",
    token_file: str = "",
    auth_reads: bool = False,
) -> ServerSecurity:
    """Read every file named; a problem is a ``ConfigError`` naming the flag or file."""
    zk_auth = load_zk_auth(zk_auth_file or None, world_readable=zk_world_readable)
    tls = load_server_tls(tls_cert, tls_key, tls_client_ca)
    tokens = load_token_set(token_file)
    if auth_reads and tokens is None:
        raise ConfigError("--auth-reads needs --token-file: there is no token to require")
    if tls_ca and tls is None:
        raise ConfigError("--tls-ca (trust for peers) needs TLS on: --tls-cert and --tls-key")
    if tls_server_name and tls is None:
        raise ConfigError("--tls-server-name (peers' name) needs TLS on: --tls-cert and --tls-key")
    if tokens is not None and tls is None:
        log.warning("bearer tokens are on without TLS: tokens cross the network in clear text")
    peer_tls = None
    if tls is not None:
        # To its peers a replica is a client: it trusts --tls-ca (else the system roots)
        # and, where peers demand client certificates, presents its own.
        peer_tls = ClientTls(
            root_ca=read_pem(tls_ca, "TLS CA", marker="CERTIFICATE") if tls_ca else None,
            cert_chain=tls.cert_chain if tls.client_ca is not None else None,
            private_key=tls.private_key if tls.client_ca is not None else None,
            server_name=tls_server_name,
        )
    return ServerSecurity(
        zk_auth=zk_auth,
        tls=tls,
        tokens=tokens,
        auth_reads=auth_reads,
        peer=ClientSecurity(tls=peer_tls, token=tokens.own if tokens else None),
    )
