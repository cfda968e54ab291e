"""Fencing: the only code that writes to ZooKeeper.

Every cluster-state write is one multi-op that begins with a check of the leader's own
lock node, so a deposed, paused or partitioned replica can never write. Also holds the
take-office multi-op, the membership API for a process's own ephemeral nodes, claims and
commit markers, and the lease that bounds how long a leader trusts its lock. It imports
``cluster`` only.
"""

from fencing.duty import run_duty
from fencing.errors import (
    ConflictReason,
    FencingError,
    LeaseLapsedError,
    MembershipError,
    NotLeaderError,
    VersionConflictError,
    WriteConflictError,
    WriteOutcomeUnknown,
)
from fencing.membership import Membership, ensure_folders
from fencing.ops import Check, Create, Delete, Op, SetData
from fencing.token import CancelReason, LeadershipToken
from fencing.writer import FencedWriter, stamp_epoch

__all__ = [
    "CancelReason",
    "Check",
    "ConflictReason",
    "Create",
    "Delete",
    "FencedWriter",
    "FencingError",
    "LeadershipToken",
    "LeaseLapsedError",
    "Membership",
    "MembershipError",
    "NotLeaderError",
    "Op",
    "SetData",
    "VersionConflictError",
    "WriteConflictError",
    "WriteOutcomeUnknown",
    "ensure_folders",
    "run_duty",
    "stamp_epoch",
]
