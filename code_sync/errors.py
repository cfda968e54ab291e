"""Errors of the code store: the caller's fault (``PackageRejected``) or ours (``StoreError``).

The split decides what a caller does next: a rejected package is refused for good (the
client must send another), while a store error is local trouble worth retrying later or
on another replica. Each keeps its cause (``raise ... from e``).
"""

from __future__ import annotations

from cluster.errors import NimbusError


class CodeSyncError(NimbusError):
    """Base of every error of code storage and distribution."""


class PackageRejected(CodeSyncError):
    """The package itself is bad (size, digest, layout); the message names the problem."""


class InvalidDigest(PackageRejected, ValueError):
    """A digest that is not 64 lowercase hex characters.

    Also a ``ValueError`` so code that validates arguments the usual way catches it.
    """


class PackageNotFound(CodeSyncError):
    """The store holds no package under this digest (never stored, removed, or damaged)."""


class StoreError(CodeSyncError):
    """Local disk trouble (disk full, I/O error, damaged file); the store is left clean."""


class PushUnverifiable(CodeSyncError):
    """A package pushed by a peer that this replica cannot verify: the cluster state names
    no such digest for that topology (no holder registered it, its record says another).
    Refused before any byte is read."""


class PushBusy(CodeSyncError):
    """This replica is receiving as many pushed packages as it takes at once."""
