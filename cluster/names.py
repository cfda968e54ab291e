"""Topology names and ids: what is allowed, and how ids are made (Storm's format)."""

from __future__ import annotations

import re

import grpc

from cluster.apierror import ApiError

NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
DIGEST_RE = re.compile(r"[0-9a-f]{64}")
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
COMPONENT_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name) or name in (".", ".."):
        raise ApiError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"invalid topology name {name!r}: use 1-128 of A-Z a-z 0-9 . _ - (not '.' or '..')",
        )
    return name


def is_digest(digest: object) -> bool:
    """The one rule for a package digest: 64 lowercase hex characters (SHA-256)."""
    return isinstance(digest, str) and DIGEST_RE.fullmatch(digest) is not None


def check_digest_arg(digest: str) -> str:
    """An API argument: ``digest`` if ``is_digest``, else ``ApiError(INVALID_ARGUMENT)``.

    The code store's ``require_digest`` applies the same rule but raises ``InvalidDigest``.
    """
    if not is_digest(digest):
        raise ApiError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"invalid digest {digest!r}: expected 64 lowercase hex characters (SHA-256)",
        )
    return digest


def check_request_id(request_id: str) -> str:
    """Empty (no idempotency asked for) or a safe ZooKeeper node name."""
    if request_id and (not REQUEST_ID_RE.fullmatch(request_id) or request_id in (".", "..")):
        raise ApiError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"invalid client request id {request_id!r}: use 1-128 of A-Z a-z 0-9 . _ -",
        )
    return request_id


def topology_id(name: str, counter: int, now_s: int) -> str:
    """``<name>-<counter>-<timestamp>``, as Storm makes them."""
    return f"{name}-{counter}-{now_s}"
