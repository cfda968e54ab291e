"""Failed calls retrying cannot fix, told as what is wrong and which flag changes it.

Two kinds: credentials the replicas refused (a missing or wrong bearer token), and TLS
that does not match (a plaintext client on a TLS port, TLS to a plaintext port, a CA
that did not sign the replicas' certificate, a certificate that names other hosts).
Every replica would answer alike, so the client stops at once instead of retrying until
its deadline. gRPC reports a TLS mismatch only in its error text: this module is the one
place that reads that text, and it hands on a ``TlsMismatch`` value, not the text.
"""

from __future__ import annotations

import enum

import grpc

from cluster.errors import NimbusError


class TlsMismatch(enum.Enum):
    PLAINTEXT_TO_TLS = "the replica speaks TLS and this client does not"
    TLS_TO_PLAINTEXT = "this client speaks TLS and the replica does not"
    UNTRUSTED = "the replica's certificate is signed by a CA this client does not trust"
    WRONG_NAME = "the replica's certificate does not name the address called"
    HANDSHAKE = "the TLS handshake failed"


_REMEDY = {
    TlsMismatch.PLAINTEXT_TO_TLS: "give --tls true and --tls-ca CA (or NIMBUS_TLS, NIMBUS_TLS_CA)",
    TlsMismatch.TLS_TO_PLAINTEXT: "drop --tls and --tls-ca (and NIMBUS_TLS, NIMBUS_TLS_CA)",
    TlsMismatch.UNTRUSTED: "give --tls-ca with the CA that signed the replicas' certificate",
    TlsMismatch.WRONG_NAME: "give --tls-server-name with the name the certificate gives",
    TlsMismatch.HANDSHAKE: "check --tls-ca, --tls-cert and --tls-key against the replicas'",
}

# What gRPC's error text says for each (BoringSSL's reason codes, gRPC core's phrases).
_SIGNS = (
    ("WRONG_VERSION_NUMBER", TlsMismatch.TLS_TO_PLAINTEXT),
    ("CERTIFICATE_VERIFY_FAILED", TlsMismatch.UNTRUSTED),
    ("Hostname Verification Check failed", TlsMismatch.WRONG_NAME),
    ("Peer name", TlsMismatch.WRONG_NAME),
    ("Tls handshake failed", TlsMismatch.HANDSHAKE),
    ("SSL_ERROR", TlsMismatch.HANDSHAKE),
)


class TlsMismatchError(NimbusError):
    """Every seed failed its TLS handshake (or closed a plaintext connection) alike."""

    def __init__(self, mismatch: TlsMismatch, seeds: list[str], details: str) -> None:
        super().__init__(
            f"TLS mismatch with {', '.join(sorted(seeds))}: {mismatch.value} ({details}): "
            f"{_REMEDY[mismatch]}"
        )
        self.mismatch = mismatch


def tls_mismatch(error: grpc.RpcError, *, tls_on: bool) -> tuple[TlsMismatch, str] | None:
    """The mismatch ``error`` shows and the words of gRPC's that show it, if it shows one.
    A closed socket counts only for a plaintext client: that is what a TLS server does on
    seeing no handshake."""
    if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN):
        return None
    text = str(error.details() if hasattr(error, "details") else "")
    for sign, mismatch in _SIGNS:
        if sign in text:
            return mismatch, sign
    if not tls_on and "Socket closed" in text:
        return TlsMismatch.PLAINTEXT_TO_TLS, "Socket closed"
    return None


def refused_message(code: grpc.StatusCode, call: str, *, sent_token: bool) -> str:
    """What a refused ``call`` means for the user: which token to give or check."""
    if code != grpc.StatusCode.UNAUTHENTICATED:
        return f"{code.name}: {call} was refused: this client's credentials are not allowed it"
    if not sent_token:
        return (
            f"UNAUTHENTICATED: {call} needs a bearer token and this client sent none: give "
            "--token-file FILE, or set NIMBUS_TOKEN_FILE or NIMBUS_TOKEN"
        )
    return (
        f"UNAUTHENTICATED: the replicas refused this client's bearer token on {call}: check "
        "--token-file (or NIMBUS_TOKEN_FILE, NIMBUS_TOKEN) against the replicas' --token-file"
    )
