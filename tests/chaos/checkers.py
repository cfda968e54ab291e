"""The safety checkers S1-S4 over a recorded history and the final ZooKeeper state.

Each returns a list of violations in words (empty: the property held), so a report can
count them and a test can show them.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence

from cluster.api import records
from nimbus.duties.lifecycle import REQUESTS_KEPT
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


def pruned_before(state: ZkState, requests_kept: int) -> float:
    """Wall seconds before which the leader may have pruned request records: it keeps the
    newest ``requests_kept`` (by their time) once it holds twice that. -inf while it
    cannot have pruned any."""
    if len(state.requests) < requests_kept:
        return float("-inf")
    return float(min(s.record.time_ms for s in state.requests.values())) / 1000.0


def s2_reflected(
    state: ZkState, history: History, *, requests_kept: int = REQUESTS_KEPT
) -> list[str]:
    """S2: every acknowledged submit and kill is in the final state; nothing else appears.

    A call the service refused for sure (``fail``) must have changed nothing: finding its
    request recorded means a retry of a call that had landed was refused instead of
    being answered with its first outcome. A request record is looked for only where the
    leader cannot have pruned it: its call started after the oldest record kept (a long
    run acknowledges more calls than the leader keeps records).
    """
    found: list[str] = []
    pruned = pruned_before(state, requests_kept)
    calls = history.snapshot()
    submits: dict[str, list[str]] = defaultdict(list)  # name -> request ids
    killed_names = {c.name for c in calls if c.kind == "kill"}
    request_ids = {c.request_id for c in calls if c.request_id}
    for call in calls:
        if call.kind == "submit":
            submits[call.name].append(call.request_id)
    for call in history.ok_writes():
        recent = history.wall0 + call.start >= pruned
        if call.request_id not in state.requests and recent:
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


def s3_code(
    state: ZkState, copies: Copies, min_replicas: int, history: History | None = None
) -> list[str]:
    """S3: a submit is acknowledged only once ``min_replicas`` replicas hold its code,
    judged from the verified copies in the replicas' stores read right after the
    acknowledgement; and every live topology keeps that many verified copies.

    ZooKeeper's holder nodes read at the acknowledgement are shown, not judged: a read
    served by a ZooKeeper server cut from its peers is stale even after ``sync`` (that
    server may still believe it leads), so an empty answer is no evidence. The stores are.

    Only the first half can catch a leader that acknowledged too early: by the end of a
    run the replicas have long caught up.
    """
    found: list[str] = []
    for call in history.ok_writes() if history is not None else []:
        if call.kind != "submit":
            continue
        if len(call.copies_at_ack) < min_replicas:
            found.append(
                f"submit {call.name}: acknowledged with verified copies on "
                f"{call.copies_at_ack}, fewer than {min_replicas} (ZooKeeper's holder "
                f"nodes then: {call.holders_at_ack})"
            )
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


#: How far apart two leadership answers may be and still overlap: the sampler's own
#: round trip is inside its (sent, received) window, so this only absorbs clock reads.
SPLIT_BRAIN_SLACK_S = 0.05


def s4_epochs(history: History) -> list[str]:
    """S4: epochs as the replicas sent them, never the client's filtered view.

    - per client, the epoch of each acknowledged change never goes below one an earlier
      change of that client was acknowledged with;
    - two replicas never claim the same epoch (discovery answers and the sampler's);
    - never two replicas answering as leader at once: a replica claiming an older epoch
      after another's newer claim was received (beyond ``SPLIT_BRAIN_SLACK_S``).
    """
    found: list[str] = []
    by_worker: dict[int, list[tuple[float, int, str]]] = defaultdict(list)
    for call in history.ok_writes():
        by_worker[call.worker].append((call.end, call.reply_epoch, f"{call.kind} {call.name}"))
    for worker, acks in by_worker.items():
        highest, after = 0, ""
        for _, epoch, what in sorted(acks):
            if epoch < highest:
                found.append(
                    f"client {worker}: {what} acknowledged in epoch {epoch} after {after} "
                    f"in epoch {highest}"
                )
            if epoch >= highest:
                highest, after = epoch, what
    claimants: dict[int, set[str]] = defaultdict(set)
    for call in history.snapshot():
        for responder, epoch in call.leader_claims:
            claimants[epoch].add(responder)
    for _sent, _received, replica, epoch in history.leadership:
        claimants[epoch].add(f"replica {replica}")
    for epoch, who in sorted(claimants.items()):
        named = {w for w in who if not w.startswith("replica ")}
        sampled = who - named
        if len(named) > 1 or len(sampled) > 1:
            found.append(f"epoch {epoch} claimed by {sorted(who)}")
    samples = sorted(history.leadership, key=lambda s: s[1])
    newest: dict[int, tuple[float, int]] = {}  # replica -> (received, epoch) of its claims
    for sent, received, replica, epoch in samples:
        for other, (seen_at, other_epoch) in newest.items():
            if other != replica and other_epoch > epoch and sent > seen_at + SPLIT_BRAIN_SLACK_S:
                found.append(
                    f"replica {replica} answered as leader of epoch {epoch} at {sent:.2f}s, "
                    f"after replica {other} led epoch {other_epoch} at {seen_at:.2f}s"
                )
        newest[replica] = (received, max(epoch, newest.get(replica, (0.0, 0))[1]))
    return found


def check_all(
    state: ZkState, history: History, copies: Copies, min_replicas: int
) -> dict[str, list[str]]:
    return {
        "S1": s1_terms(state, history),
        "S2": s2_reflected(state, history),
        "S3": s3_code(state, copies, min_replicas, history),
        "S4": s4_epochs(history),
    }


def stale_claims(
    samples: Sequence[tuple[float, float, int, int]], old: int, epoch: int
) -> list[str]:
    """Answers (sent, received, replica, epoch) in which replica ``old``, deposed from term
    ``epoch``, still answered as leader to a request sent after some replica's answer
    claiming a newer term had been received: in real time, after the new term.

    Each answer is timed on its own. A poll asks the replicas one after another, so one
    poll can hold the old leader's answer from before the new term and the new leader's
    from after it; judging by the poll's time would call that overlap. Every answer is
    kept, before and after the new term is first seen: a check that stops recording when
    the new term appears cannot see the old leader claiming after it.
    """
    newer_at = min((r for _s, r, _replica, e in samples if e > epoch), default=None)
    if newer_at is None:
        return []
    return [
        f"at {sent:.3f}: replica {old} claimed epoch {e} after a newer term (seen at "
        f"{newer_at:.3f})"
        for sent, _r, replica, e in samples
        if replica == old and e <= epoch and sent > newer_at
    ]
