"""The winner's reads, sent before it wins: a planned handover costs the old leader's
delete and our take-office multi-op, not a listing and a round trip of reads between.

The code gate after winning (``/storms``), ``step_aside`` (``/handover``, ``/leader-epoch``)
and ``take_office`` decide from reads that must be as fresh as reads sent once every lock
node ahead of ours is gone: from then on no fenced write of an earlier term can land.
Two ways to have them without a round trip after winning:

- Behind every listing of the queue: ZooKeeper answers one session's requests in the
  order sent, so reads queued right after the listing that shows our node first answer
  from a state at least as new as it, and nodes ahead never reappear (they only join
  behind, with higher sequence numbers).
- Next in line (one node ahead): the same reads again, after watches armed on all three
  paths (a child watch on ``/storms``, data watches on the other two). ZooKeeper delivers
  one session's events in the order the changes happened, and kazoo runs watch callbacks
  on one thread in that order; so when the node ahead's deletion arrives and none of those
  watches fired, nor did the connection drop (watches fired on reconnect come in no useful
  order), nothing they read changed before the deletion: we won, with those reads, and
  kazoo's listing is skipped. Any change, or a drop, and the listing runs as kazoo's does.

Next in line, the take-office multi-op itself goes out from kazoo's event thread as the
deletion arrives (``SendOffice``, ``leader.office_ahead``), before the elector's thread
wakes: a graceful handover then costs the old leader's delete and our multi-op, with no
thread hop and no decision between. Either way the multi-op still checks everything it
was decided from. The child watch costs a listing of ``/storms`` on the election session,
so a replica arms only while that folder is small (``WATCHED_STORMS_MAX``); beyond it, a
handover lists the queue as kazoo does (bulk reads stay off the election session: DESIGN,
item 8).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.recipe.lock import Lock
from kazoo.retry import ForceRetryError

from cluster.paths import Paths
from fencing.office import OfficeAttempt, OfficeReads, send_office_reads
from leader.fold import Fold


@dataclass(frozen=True)
class WinnerReads:
    """Sent together: the stat of ``/storms`` (the code gate's "now"), ``/handover`` and
    take-office's reads (whose ``/leader-epoch`` ``step_aside`` reads too)."""

    storms: IAsyncResult
    handover: IAsyncResult
    office: OfficeReads


def send_winner_reads(client: KazooClient, paths: Paths, lock_node: str) -> WinnerReads:
    return WinnerReads(
        storms=client.exists_async(paths.storms),
        handover=client.get_async(paths.handover),
        office=send_office_reads(client, paths, paths.beat(lock_node)),
    )


@dataclass(frozen=True)
class DecidedAhead:
    """What was decided at the node ahead's deletion: the take-office multi-op sent, with
    the term's first beat it writes (its send time, the claim it announces: ``renew`` once
    acknowledged); or, ``attempt`` None, stepping aside for a planned handover (``aside``,
    why: the step-aside check answers once per handover)."""

    attempt: OfficeAttempt | None
    sent: float = 0.0
    lease: float = 0.0
    aside: str = ""


#: At the node ahead's deletion (kazoo's event thread; must not raise): send the take-office
#: multi-op for our lock node, or step aside, decided from the reads; None: the elector's.
SendOffice = Callable[[str, WinnerReads], DecidedAhead | None]

#: How long the lock recipe, woken by a deletion, waits for our own preemption's reply.
FOLD_WAIT = 5.0

#: Topologies up to which the replica next in line lists ``/storms`` to watch it.
WATCHED_STORMS_MAX = 1000


@dataclass
class _NextInLine:
    """Reads sent while one node (``predecessor``) was ahead of ours (``node``), behind
    watches on what they read; ``changed`` once any of those fired or the connection
    changed state."""

    predecessor: str
    node: str
    reads: WinnerReads
    storms_watch: IAsyncResult  # the child watch is armed only if this listing succeeds
    changed: threading.Event = field(default_factory=threading.Event)
    office: DecidedAhead | None = None  # decided at the deletion


def queue_lock(
    client: KazooClient,
    paths: Paths,
    identifier: str,
    fold: Fold | None = None,
    send_office: SendOffice | None = None,
) -> ReadAheadLock:
    """A place in the lock queue: the one kazoo recipe outside ``fencing/`` that writes
    (its own lock node; tests/test_write_discipline.py holds every other module to that)."""
    return ReadAheadLock(client, paths, identifier, fold, send_office)


class ReadAheadLock(Lock):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's ``Lock`` on the lock queue with the winner's reads sent ahead (see the
    module's doc): ``reads`` holds those to decide from once ``acquire`` returns True, and
    ``office`` the take-office multi-op ``send_office`` sent at the deletion, if it did.

    The elector's thread lists; kazoo's event thread sees the watches fire (and sends the
    reads again after a change) and the node ahead go; kazoo's connection thread sees the
    connection change. ``_guard`` keeps the three to one view of what is next in line.
    """

    def __init__(
        self,
        client: KazooClient,
        paths: Paths,
        identifier: str,
        fold: Fold | None = None,
        send_office: SendOffice | None = None,
    ) -> None:
        super().__init__(client, paths.leader_lock, identifier=identifier)
        self._paths = paths
        self._fold = fold
        self._send_office = send_office
        self.reads: WinnerReads | None = None
        self.office: DecidedAhead | None = None
        self.skipped_listing = False  # won on the deletion of the node ahead
        self._guard = threading.Lock()
        self._next: _NextInLine | None = None
        self._won_by: _NextInLine | None = None
        self._listening = False

    def _get_predecessor(self, node: str) -> str | None:
        """kazoo's (2.11), with the reads sent behind the listing, and no listing at all
        when the node ahead went while what we read stayed put."""
        with self._guard:
            won, self._won_by, self._next = self._won_by, None, None
        # A multi-op sent at the deletion is ours to collect, whatever changed since.
        if won is not None and (won.office is not None or self._still_valid(won)):
            self.reads, self.office, self.skipped_listing = won.reads, won.office, True
            self._stop_listening()
            return None
        if self._fold is not None and self._fold.taken(self._paths.lock_node(node), FOLD_WAIT):
            # Our preemption's multi-op deleted the node ahead and took office for us: the
            # queue needs no listing (behind our beats in flight: two fsyncs on a slow disk).
            self.skipped_listing = True
            self._stop_listening()
            return None
        listing = self.client.get_children_async(self.path)
        self.reads = send_winner_reads(self.client, self._paths, self._paths.lock_node(node))
        children = listing.get()
        sequence = node[len(self.prefix) :]
        ahead = []
        found_self = False
        for child in children:
            match = self._contenders_re.search(child)
            if match is not None and match.group(1) < sequence:
                ahead.append(match)
            if child == node:
                found_self = True
        if not found_self:  # our node went with a session kazoo recovered from: kazoo retries
            raise ForceRetryError()
        if not ahead:
            self._stop_listening()
            return None
        predecessor: str = max(ahead, key=lambda m: m.groups()).string
        if len(ahead) == 1 and _few(self.reads.storms):
            with self._guard:
                self._next = self._read_watched(self._paths.lock_node(predecessor), node)
        return predecessor

    def _still_valid(self, won: _NextInLine) -> bool:
        """The child watch on ``/storms`` was armed (its listing is answered by now, or
        soon: sent before the deletion, or after it and then fresh anyway)."""
        try:
            won.storms_watch.get()
        except KazooException:
            return False
        return not won.changed.is_set()

    def _read_watched(self, predecessor: str, node: str) -> _NextInLine:
        """Under the guard: arm the watches, then send the reads they guard."""
        if not self._listening:
            self.client.add_listener(self._on_state)
            self._listening = True
        storms_watch = self.client.get_children_async(self._paths.storms, watch=self._on_change)
        self.client.exists_async(self._paths.handover, watch=self._on_change)
        self.client.exists_async(self._paths.leader_epoch, watch=self._on_change)
        reads = send_winner_reads(self.client, self._paths, self._paths.lock_node(node))
        return _NextInLine(predecessor, node, reads, storms_watch)

    def cancel(self) -> None:
        self._stop_listening()
        super().cancel()

    def _stop_listening(self) -> None:
        """Our place is decided: no connection listener left behind with the lock."""
        with self._guard:
            self._next = None
            if self._listening:
                self.client.remove_listener(self._on_state)
                self._listening = False

    def _on_change(self, _: WatchedEvent) -> None:
        """kazoo's event thread: what we read changed; read it again, behind new watches."""
        with self._guard:
            watched = self._next
            if watched is not None:
                watched.changed.set()
                self._next = None
                if _few(watched.reads.storms, wait=False):
                    self._next = self._read_watched(watched.predecessor, watched.node)

    def _on_state(self, _: str) -> bool:
        """kazoo's connection thread: watches fired on a reconnect come in no useful order;
        until the next listing, the node ahead's deletion is no win."""
        with self._guard:
            if self._next is not None:
                self._next.changed.set()
            self._listening = False
        return True  # kazoo drops a listener that returns True

    def _watch_predecessor(self, event: WatchedEvent) -> None:
        """kazoo's event thread: every earlier event's callback has run, so ``changed``
        says whether anything our reads read changed before this deletion. Won: what
        changes from now on (our own multi-op's writes first) is the term's to see."""
        won = None
        with self._guard:
            watched = self._next
            if (
                watched is not None
                and event.type == EventType.DELETED
                and event.path == watched.predecessor
                and not watched.changed.is_set()
            ):
                self._won_by = won = watched
                self._next = None
        if won is not None and self._send_office is not None and _answered(won):
            won.office = self._send_office(self._paths.lock_node(won.node), won.reads)
        super()._watch_predecessor(event)


def _answered(won: _NextInLine) -> bool:
    """Every read the take-office decision needs is answered (sent before the deletion, so
    by now unless the connection dropped; kazoo's event thread must not wait on one), and
    the child watch on ``/storms`` was armed. A read that failed is the decision's to see
    (``/handover`` is mostly absent)."""
    office = won.reads.office
    reads = [won.reads.storms, won.reads.handover, office.leader_epoch, office.epochs]
    reads += [office.beat] if office.beat is not None else []
    armed = won.storms_watch.ready() and won.storms_watch.successful()
    return armed and all(read.ready() for read in reads)


def _few(storms: IAsyncResult, *, wait: bool = True) -> bool:
    """``/storms`` (its stat, read) holds at most ``WATCHED_STORMS_MAX`` topologies; False
    when it could not be read, or (``wait`` False: kazoo's event thread) not yet."""
    if not wait and not storms.ready():
        return False
    try:
        stat = storms.get()
    except KazooException:
        return False
    return stat is not None and int(stat.numChildren) <= WATCHED_STORMS_MAX
