"""The safety checkers S1-S4 over a recorded history and the final ZooKeeper state.

Each returns a list of violations in words (empty: the property held), so a report can
count them and a test can show them.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

from cluster.api import records
from tests.chaos.history import History
from tests.chaos.state import ZkState

Copies = Callable[[str], list[int]]


def s1_terms(state: ZkState, history: History) -> list[str]:
    """S1: every record was applied inside the term of the epoch it carries.

    The term of epoch e runs from the czxid of ``/epochs/e`` to that of the next recorded
    term; a record whose modification zxid falls outside was written by a replica outside
    its term. Also: every acknowledged write's own record carries the epoch the client
    was told. Records older than the oldest kept term (pruned history) are not judged.
    """
    found: list[str] = []
    if not state.terms:
        return ["no terms recorded under /epochs"] if state.epoch_records() else []
    epochs = sorted(state.terms)
    starts = [state.terms[e].start_zxid for e in epochs]
    for stored in state.epoch_records():
        if stored.record is None:
            found.append(f"{stored.path}: does not parse")
            continue
        if stored.epoch < epochs[0] and stored.epoch > 0 and stored.mzxid < starts[0]:
            continue  # its term was pruned: nothing to compare with
        term = state.terms.get(stored.epoch)
        if term is None:
            found.append(f"{stored.path}: epoch {stored.epoch} is no recorded term")
            continue
        # The term that was current when ZooKeeper applied the write.
        at = bisect.bisect_right(starts, stored.mzxid) - 1
        current = epochs[at] if at >= 0 else None
        if current != stored.epoch:
            found.append(
                f"{stored.path}: carries epoch {stored.epoch} but was written at zxid "
                f"{stored.mzxid:#x}, in the term of epoch {current}"
            )
    for call in history.ok_writes():
        request = state.requests.get(call.request_id)
        if request is not None and request.epoch != call.reply_epoch:
            found.append(
                f"{call.kind} {call.name}: acknowledged with epoch {call.reply_epoch}, "
                f"recorded by epoch {request.epoch}"
            )
    return found


def s2_reflected(state: ZkState, history: History) -> list[str]:
    """S2: every acknowledged submit and kill is in the final state; nothing else appears.

    A call the service refused for sure (``fail``) must have changed nothing: finding its
    request recorded means a retry of a call that had landed was refused instead of
    being answered with its first outcome.
    """
    found: list[str] = []
    calls = history.snapshot()
    submits: dict[str, list[str]] = defaultdict(list)  # name -> request ids
    killed_names = {c.name for c in calls if c.kind == "kill"}
    request_ids = {c.request_id for c in calls if c.request_id}
    for call in calls:
        if call.kind == "submit":
            submits[call.name].append(call.request_id)
    for call in history.ok_writes():
        if call.request_id not in state.requests:
            found.append(f"{call.kind} {call.name}: acknowledged but its request is not recorded")
        stored = state.storms.get(call.topology_id)
        if stored is None:
            found.append(f"{call.kind} {call.name}: acknowledged {call.topology_id} is gone")
            continue
        base: records.StormBase = stored.record
        if call.kind == "submit" and (base.name, base.digest) != (call.name, call.digest):
            found.append(f"submit {call.name}: stored as {base.name} / {base.digest[:12]}")
        if call.kind == "kill" and base.status != records.KILLED:
            found.append(f"kill {call.name}: acknowledged but status is {base.status}")
    for call in calls:
        if call.outcome == "fail" and call.request_id in state.requests:
            found.append(
                f"{call.kind} {call.name}: refused ({call.code}) but its request was done: "
                "a retry did not return the first outcome"
            )
    per_name: dict[str, list[str]] = defaultdict(list)
    for tid, stored in state.storms.items():
        base = stored.record
        if base is None:
            continue
        per_name[base.name].append(tid)
        if base.name not in submits:
            found.append(f"{tid}: topology {base.name} that no call submitted")
        elif base.client_request_id not in submits[base.name]:
            found.append(f"{tid}: request id {base.client_request_id} of no submit call")
        if base.status == records.KILLED and base.name not in killed_names:
            found.append(f"{tid}: KILLED but no call killed {base.name}")
        if base.status in (records.INACTIVE, records.REBALANCING):
            found.append(f"{tid}: status {base.status} that no call asked for")
    for name, tids in per_name.items():
        if len(tids) > 1:
            found.append(f"{name}: {len(tids)} topologies for one name: {sorted(tids)}")
    for rid in state.requests:
        if rid not in request_ids:
            found.append(f"/requests/{rid}: no call sent this request id")
    return found


def s3_code(state: ZkState, copies: Copies, min_replicas: int) -> list[str]:
    """S3: every live topology has a verified package on at least ``min_replicas`` replicas."""
    found: list[str] = []
    for tid, stored in sorted(state.storms.items()):
        base = stored.record
        if base is None or base.status == records.KILLED:
            continue
        if base.status == records.CODE_MISSING:
            found.append(f"{tid}: CODE_MISSING")
            continue
        held = copies(base.digest)
        if len(held) < min_replicas:
            found.append(f"{tid}: verified copies on {held}, fewer than {min_replicas}")
    return found


def s4_epochs(history: History) -> list[str]:
    """S4: no client ever reports a lower epoch than one it reported before."""
    found: list[str] = []
    by_worker: dict[int, list[tuple[float, int, int, str]]] = defaultdict(list)
    for call in history.snapshot():
        by_worker[call.worker].append(
            (call.start, call.epoch_seen, call.reply_epoch if call.kind == "leader" else 0,
             f"{call.kind} {call.name}".strip())
        )  # fmt: skip
    for worker, calls in by_worker.items():
        highest = 0
        for _, seen, leader_epoch, what in sorted(calls):
            if leader_epoch and leader_epoch < highest:
                found.append(f"client {worker}: leader() said epoch {leader_epoch} after {highest}")
            if seen < highest:
                found.append(f"client {worker}: {what} left epoch {seen} after {highest}")
            highest = max(highest, seen, leader_epoch)
    return found


def check_all(
    state: ZkState, history: History, copies: Copies, min_replicas: int
) -> dict[str, list[str]]:
    return {
        "S1": s1_terms(state, history),
        "S2": s2_reflected(state, history),
        "S3": s3_code(state, copies, min_replicas),
        "S4": s4_epochs(history),
    }
