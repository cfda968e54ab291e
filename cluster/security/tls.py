"""TLS for gRPC: server certificate and key from files, optional client certificates.

Files are read and sanity-checked at start, so a wrong path or a key given as the
certificate fails with a message naming the file instead of an opaque handshake error on
the first call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from cluster.errors import ConfigError
from cluster.security.zkauth import read_secret_file

_MAX_PEM_BYTES = 1 << 20


def read_pem(path: str, what: str, *, marker: str) -> bytes:
    """A PEM file's bytes; ``marker`` (e.g. ``CERTIFICATE``) must appear in a BEGIN line."""
    secret = marker == "PRIVATE KEY"  # certificates are public
    text = read_secret_file(path, what, limit=_MAX_PEM_BYTES, secret=secret)
    if f"-----BEGIN {marker}" not in text and not (
        marker == "PRIVATE KEY" and "PRIVATE KEY-----" in text
    ):
        raise ConfigError(f"{what} {path} holds no PEM '{marker}' block")
    return text.encode()


@dataclass(frozen=True)
class ServerTls:
    """The server's certificate chain and key; ``client_ca`` set = client certs required."""

    cert_chain: bytes
    private_key: bytes = field(repr=False)
    client_ca: bytes | None = None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


@dataclass(frozen=True)
class ClientTls:
    """What a client trusts (``root_ca``, None: the system's roots) and may present."""

    root_ca: bytes | None = None
    cert_chain: bytes | None = None
    private_key: bytes | None = field(default=None, repr=False)
    server_name: str = ""  # expected name in the server's certificate, when not the address

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_ca,
            private_key=self.private_key,
            certificate_chain=self.cert_chain,
        )


def load_server_tls(cert: str, key: str, client_ca: str = "") -> ServerTls | None:
    """None when neither certificate nor key is given (plaintext, as before)."""
    if not cert and not key:
        if client_ca:
            raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key (TLS on)")
        return None
    if not cert or not key:
        raise ConfigError("TLS needs both --tls-cert and --tls-key")
    return ServerTls(
        cert_chain=read_pem(cert, "TLS certificate", marker="CERTIFICATE"),
        private_key=read_pem(key, "TLS key", marker="PRIVATE KEY"),
        client_ca=read_pem(client_ca, "TLS client CA", marker="CERTIFICATE") if client_ca else None,
    )


def load_client_tls(
    *, enabled: bool, ca: str = "", cert: str = "", key: str = "", server_name: str = ""
) -> ClientTls | None:
    """None unless TLS is asked for (``enabled``, or any of the files given)."""
    if not (enabled or ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise ConfigError("a client certificate needs both --tls-cert and --tls-key")
    return ClientTls(
        root_ca=read_pem(ca, "TLS CA", marker="CERTIFICATE") if ca else None,
        cert_chain=read_pem(cert, "TLS certificate", marker="CERTIFICATE") if cert else None,
        private_key=read_pem(key, "TLS key", marker="PRIVATE KEY") if key else None,
        server_name=server_name,
    )
