"""The sweeper's and the scheduler's removals commit only with their evidence at the quorum.

Their reads are answered by one ZooKeeper server, which may disagree with its quorum: a
node it shows may be a ghost that vanishes, a node it lacks may be there, a record it
shows may be older than the quorum's (ZOOKEEPER-4837). ``DisagreeingServer`` wraps a real
client on a real ZooKeeper and answers reads as such a server would; the writer keeps its
own client, so every multi-op is judged by the real quorum. Each test shows a removal
refused (the node still there after the duty's pass), and the same duty removing what is
truly gone once the server agrees.
"""

from __future__ import annotations

import time
from typing import Any, cast

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat

from cluster.api import records
from cluster.paths import worker_name
from fencing import FencedWriter
from nimbus.duties.scheduler import SchedulerDuty
from nimbus.duties.sweeper import sweep
from tests.test_scheduler import PATHS, sup
from tests.test_scheduler_duty import add_topology, lead, placements


class DisagreeingServer:
    """Reads as a server that disagrees with its quorum: ``hidden`` paths it lacks,
    ``shown`` paths it answers with other content and stat. Anything else (sync, state,
    the connection) is the real client's."""

    def __init__(self, real: KazooClient) -> None:
        self.real = real
        self.hidden: set[str] = set()
        self.shown: dict[str, tuple[bytes, ZnodeStat]] = {}

    @property
    def client(self) -> KazooClient:
        return cast(KazooClient, self)

    def exists(self, path: str, watch: Any = None) -> ZnodeStat | None:
        if path in self.hidden:
            return None
        if path in self.shown:
            return self.shown[path][1]
        stat: ZnodeStat | None = self.real.exists(path, watch)
        return stat

    def get(self, path: str, watch: Any = None) -> tuple[bytes, ZnodeStat]:
        if path in self.hidden:
            raise NoNodeError(path)
        if path in self.shown:
            return self.shown[path]
        found: tuple[bytes, ZnodeStat] = self.real.get(path, watch)
        return found

    def get_async(self, path: str, watch: Any = None) -> IAsyncResult:
        result: IAsyncResult = self.real.handler.async_result()
        try:
            result.set(self.get(path))
        except NoNodeError as e:
            result.set_exception(e)
        return result

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        if path in self.hidden:
            raise NoNodeError(path)
        children: list[str] = self.real.get_children(path, watch)
        return [c for c in children if f"{path}/{c}" not in self.hidden]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def outcomes_of(writer: FencedWriter) -> list[str]:
    seen: list[str] = []
    writer.observer = seen.append
    return seen


def plant_trees(client: KazooClient, tid: str) -> list[str]:
    """A topology's per-topology trees, as its workers and the leader leave them."""
    client.create(PATHS.assignment(tid), b"", makepath=True)
    client.create(PATHS.workerbeat(tid, worker_name("a", 0)), b"", makepath=True)
    client.create(PATHS.component_error(tid, "c", "e1"), b"", makepath=True)
    client.create(PATHS.commit(tid, "out", 7), b"", makepath=True)
    return [
        PATHS.assignment(tid),
        PATHS.workerbeats_of(tid),
        PATHS.errors_of(tid),
        PATHS.commits_of(tid),
    ]


def present(client: KazooClient, paths: list[str]) -> list[str]:
    return [p for p in paths if client.exists(p) is not None]


# -- the sweeper ----------------------------------------------------------------------------


def test_the_sweep_keeps_the_trees_of_a_topology_whose_record_our_server_lacks(
    zk_client: KazooClient,
) -> None:
    """Our server lacks ``/storms/wc-1-1``; the quorum has it. Its trees are no orphans:
    each removal proves the record absent in its own multi-op, and the quorum refuses
    it, once a sweep for the topology (not once a tree, not again at once)."""
    _, writer = lead(zk_client, "leader:1")
    writer.create_record(PATHS.storm("wc-1-1"), records.StormBase(name="wc"))
    live = plant_trees(zk_client, "wc-1-1")
    gone = plant_trees(zk_client, "gone-1-1")
    server = DisagreeingServer(zk_client)
    server.hidden.add(PATHS.storm("wc-1-1"))
    outcomes = outcomes_of(writer)

    removed = sweep(server.client, PATHS, writer)

    assert present(zk_client, live) == live, "a live topology's trees were removed"
    assert outcomes.count("conflict") == 1, outcomes
    assert sorted(removed) == sorted(f"orphan {tree} removed" for tree in gone)
    assert present(zk_client, gone) == [], "a truly gone topology's trees stay removed"
    outcomes.clear()
    assert sweep(server.client, PATHS, writer) == []
    assert outcomes == ["conflict"] and present(zk_client, live) == live


def _resurrected_pair(writer: FencedWriter) -> dict[str, records.StormBase]:
    """Two records of one submit request (``test_sweeper``'s resurrected attempt): the
    request's record at the quorum names ``wc-17-1``, the one acknowledged."""
    bases = {
        tid: records.StormBase(name="wc", status=records.ACTIVE, client_request_id="r1")
        for tid in ("wc-16-1", "wc-17-1")
    }
    for tid, base in bases.items():
        writer.create_record(PATHS.storm(tid), base)
    writer.create(PATHS.name("wc"), b"wc-16-1")
    writer.create(PATHS.request("r1"), _answer("wc-17-1"))
    return bases


def _answer(tid: str) -> bytes:
    outcome = records.RequestOutcome(request_id="r1", method="SubmitTopology", topology_id=tid)
    return outcome.SerializeToString()


def test_a_resurrected_attempt_stays_while_the_quorum_names_it_and_our_server_has_no_name(
    zk_client: KazooClient,
) -> None:
    """Our server lacks ``/names/wc``; at the quorum it names the attempt. Removing the
    attempt then would leave the name naming a removed topology: the removal proves the
    name absent, and the quorum refuses it. Once the server agrees, the attempt goes and
    the name follows the acknowledged topology."""
    _, writer = lead(zk_client, "leader:1")
    bases = _resurrected_pair(writer)
    server = DisagreeingServer(zk_client)
    server.hidden.add(PATHS.name("wc"))

    assert sweep(server.client, PATHS, writer, storms=bases) == []
    assert sorted(zk_client.get_children(PATHS.storms)) == ["wc-16-1", "wc-17-1"]
    assert zk_client.get(PATHS.name("wc"))[0] == b"wc-16-1"

    server.hidden.clear()
    assert sweep(server.client, PATHS, writer, storms=bases) == [
        "resurrected attempt wc-16-1 removed (wc-17-1 kept)"
    ]
    assert zk_client.get(PATHS.name("wc"))[0] == b"wc-17-1"


def test_a_replay_names_only_the_acknowledged_topology_whatever_our_server_shows(
    zk_client: KazooClient,
) -> None:
    """The request's record tells which of two records was acknowledged. Our server shows
    it naming the other: as it was at an older version (a server behind its quorum), or
    as a ghost naming a ghost topology the quorum never had. The sweep acts on the record
    only at the version it read, and on the acknowledged topology only while the quorum
    has it: neither view removes ``wc-17-1``, and the record a retry is answered from
    names ``wc-17-1``, which is still there."""
    _, writer = lead(zk_client, "leader:1")
    bases = _resurrected_pair(writer)
    _, old = zk_client.get(PATHS.request("r1"))
    writer.set(PATHS.request("r1"), _answer("wc-17-1"), version=old.version)
    server = DisagreeingServer(zk_client)
    server.shown[PATHS.request("r1")] = (_answer("wc-16-1"), old)  # behind the quorum

    assert sweep(server.client, PATHS, writer, storms=bases) == []

    ghost = records.StormBase(name="wc", status=records.ACTIVE, client_request_id="r1")
    seen_by_a_ghost = {**bases, "wc-18-1": ghost}
    _, stat = zk_client.get(PATHS.request("r1"))
    server.shown[PATHS.request("r1")] = (_answer("wc-18-1"), stat)  # a ghost's record

    assert sweep(server.client, PATHS, writer, storms=seen_by_a_ghost) == []
    assert sorted(zk_client.get_children(PATHS.storms)) == ["wc-16-1", "wc-17-1"]
    replayed = records.RequestOutcome.FromString(zk_client.get(PATHS.request("r1"))[0])
    assert replayed.topology_id == "wc-17-1"


# -- the scheduler --------------------------------------------------------------------------


def _beating(client: KazooClient, tid: str, *slots: int) -> list[str]:
    """Fresh heartbeats of ``tid`` on supervisor ``a``'s ``slots``."""
    beat = records.WorkerHeartbeat(time_ms=int(time.time() * 1000)).SerializeToString()
    made = [PATHS.workerbeat(tid, worker_name("a", slot)) for slot in slots]
    for path in made:
        client.create(path, beat, makepath=True)
    return made


def test_the_scheduler_keeps_an_assignment_and_its_slots_while_the_quorum_has_the_record(
    zk_client: KazooClient,
) -> None:
    """Our server lacks ``/storms/wc`` (and so the pass's view does); the quorum has it.
    The removal of its assignment proves the record absent and is refused: the workers
    keep their assignment and heartbeats, and their slots are not given to another."""
    _, writer = lead(zk_client, "leader:1")
    zk_client.create(PATHS.supervisor("a"), sup("a", 3).SerializeToString(), ephemeral=True)
    add_topology(writer, "wc", 2)
    honest = SchedulerDuty(zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0)
    assert honest.run_once() == ["wc: none -> [a-0, a-1]"]
    beats = _beating(zk_client, "wc", 0, 1)
    server = DisagreeingServer(zk_client)
    server.hidden.add(PATHS.storm("wc"))
    duty = SchedulerDuty(server.client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0)
    add_topology(writer, "new", 2)

    assert duty.run_once() == ["new: none -> [a-2]"], "only the free slot may be used"
    assert placements(zk_client)["wc"] == [("a", 0), ("a", 1)]
    assert present(zk_client, beats) == beats

    server.hidden.clear()
    writer.delete(PATHS.storm("wc"))  # really gone now: proved, removed, slots free
    assert duty.run_once() == [
        "new: [a-2] -> [a-2, a-0]",
        "wc: assignment removed (no longer in /storms)",
    ]
    assert present(zk_client, beats) == []


def test_the_scheduler_keeps_heartbeats_our_server_calls_orphans_or_stale(
    zk_client: KazooClient,
) -> None:
    """Heartbeats of a topology our server lacks (no assignment: no ``_remove`` took
    them), and one it shows stale though its worker beat since at the quorum, stay."""
    _, writer = lead(zk_client, "leader:1")
    zk_client.create(PATHS.supervisor("a"), sup("a", 3).SerializeToString(), ephemeral=True)
    writer.create_record(PATHS.storm("wc"), records.StormBase(name="wc", status=records.KILLED))
    orphaned = _beating(zk_client, "wc", 0)
    add_topology(writer, "etl", 1)
    stale = _beating(zk_client, "etl", 2)[0]  # slot a-2: not assigned to etl
    _, stat = zk_client.get(stale)
    long_ago = records.WorkerHeartbeat(time_ms=1).SerializeToString()
    zk_client.set(
        stale, records.WorkerHeartbeat(time_ms=int(time.time() * 1000) + 1).SerializeToString()
    )
    server = DisagreeingServer(zk_client)
    server.hidden.add(PATHS.storm("wc"))
    server.shown[stale] = (long_ago, stat)  # behind: the beat before the last
    duty = SchedulerDuty(server.client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0)

    assert duty.run_once() == ["etl: none -> [a-0]"]
    assert present(zk_client, [*orphaned, stale]) == [*orphaned, stale]


def test_the_scheduler_keeps_an_assignment_whose_kill_our_server_showed_as_a_ghost(
    zk_client: KazooClient,
) -> None:
    """Our server shows ``wc`` killed, a kill the quorum never committed (its record
    there is the one before): the removal checks the record at the version the view
    read, and is refused."""
    _, writer = lead(zk_client, "leader:1")
    zk_client.create(PATHS.supervisor("a"), sup("a", 3).SerializeToString(), ephemeral=True)
    add_topology(writer, "wc", 2)
    duty_before = SchedulerDuty(zk_client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0)
    assert duty_before.run_once() == ["wc: none -> [a-0, a-1]"]
    data, stat = zk_client.get(PATHS.storm("wc"))
    killed = records.StormBase.FromString(data)
    killed.status = records.KILLED
    server = DisagreeingServer(zk_client)
    server.shown[PATHS.storm("wc")] = (killed.SerializeToString(), stat._replace(version=1))
    duty = SchedulerDuty(server.client, PATHS, writer, interval=0.2, heartbeat_timeout=30.0)

    assert duty.run_once() == []
    assert placements(zk_client)["wc"] == [("a", 0), ("a", 1)]


# -- the lifecycle's removal of a killed topology ------------------------------------------


def test_a_killed_topologys_removal_waits_while_our_server_lacks_its_name(
    zk_client: KazooClient,
) -> None:
    """Our server lacks ``/names/wc``, which the quorum has, naming the killed topology:
    removing the record without the name would leave the name naming nothing (no new
    ``wc`` could be submitted). The removal proves the name absent and is refused; once
    the server agrees, record and name go together."""
    from nimbus.duties.lifecycle import LifecycleDuty

    _, writer = lead(zk_client, "leader:1")
    killed = records.StormBase(name="wc", status=records.KILLED, kill_time_ms=1, kill_wait_s=0)
    writer.create_record(PATHS.storm("wc-1-1"), killed)
    zk_client.create(PATHS.name("wc"), b"wc-1-1")
    server = DisagreeingServer(zk_client)
    server.hidden.add(PATHS.name("wc"))
    duty = LifecycleDuty(server.client, PATHS, writer, interval=1.0, wall_ms=lambda: 10_000)

    assert duty.run_once() == []  # refused: logged, the others go on
    assert present(zk_client, [PATHS.storm("wc-1-1"), PATHS.name("wc")]) == [
        PATHS.storm("wc-1-1"),
        PATHS.name("wc"),
    ]
    server.hidden.clear()
    assert duty.run_once() == ["wc-1-1: removed"]
    assert present(zk_client, [PATHS.storm("wc-1-1"), PATHS.name("wc")]) == []
