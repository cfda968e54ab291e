"""Errors of the fenced writer. Each says whether anything was written."""

from __future__ import annotations

import enum

from cluster.errors import NimbusError


class FencingError(NimbusError):
    """Base of the fenced writer's errors."""


class NotLeaderError(FencingError):
    """This replica may not write cluster state: nothing was written.

    Raised when the leadership token is cancelled (no round trip was made) or when the
    multi-op's check of the replica's own lock node failed (the node is gone: session
    expired, or an operator removed it). ``leader`` names the current leader when known.
    """

    def __init__(self, message: str, *, leader: str | None = None) -> None:
        if leader:
            message = f"{message} (current leader: {leader})"
        super().__init__(message)
        self.leader = leader


class LeaseLapsedError(NotLeaderError):
    """The lease ran out while the token lives (a pause, a slow link): nothing was written.

    Not the end of the term: the next heartbeat may renew the lease, or the connection
    listener cancels the token. Leader work pauses until one of the two happens.
    """


class ConflictReason(enum.Enum):
    """What a failed target operation met: what callers decide on. The words are for people."""

    BAD_VERSION = "bad-version"  # a compare-and-set lost: the node changed since read
    EXISTS = "exists"  # a create found the node there
    NO_NODE = "no-node"  # the target (or a create's parent) does not exist
    NOT_EMPTY = "not-empty"  # a delete found children
    OTHER = "other"  # anything else ZooKeeper refused; the message names it


class WriteConflictError(FencingError):
    """The leader's check passed but a target operation failed: nothing was written.

    A conflict with other state (node exists, wrong version, missing target) is the
    caller's business and leaves leadership alone. ``reason`` says which.
    """

    def __init__(self, message: str, *, path: str, reason: ConflictReason) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class VersionConflictError(WriteConflictError):
    """A compare-and-set lost a race: the record changed since it was read."""


class WriteOutcomeUnknown(FencingError):
    """The connection dropped with the write in flight: it may or may not be applied.

    Never re-sent automatically. Read back to learn what happened; a write that was not
    applied can never be applied later on a new session, because its check names the
    old session's lock node.
    """


class MembershipError(FencingError):
    """A membership write named a path the caller does not own."""
