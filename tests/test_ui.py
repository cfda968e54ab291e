"""The web UI in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

Three replicas run as processes, each behind its own TCP proxy to ZooKeeper so one can be
cut off; a supervisor heartbeats two worker slots; the word-count example is submitted.
The page is read the way a person reads it: by what it shows.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.api import records
from code_sync.package import make_package
from code_sync.store import CodeStore
from devtools.faultproxy import FaultProxy
from devtools.zkserver import ZooKeeperCluster
from leader.discovery import LeaderInfo
from nimbus.client import NimbusClient
from nimbus.server.ui.graph import GraphCache
from nimbus.server.ui.snapshot import terms
from tests.cluster import REPO, Replica, free_port, wait_for_agreed_leader
from tests.processes import nimbus_dev, stop_process
from tests.replica_fixtures import ROOT, Spawn, submit, sync_flags
from tests.tiers import needs
from tests.waiting import wait_until

CHROMIUM = Path(os.environ.get("NIMBUS_TEST_CHROMIUM", "/usr/bin/chromium"))
EXAMPLE = REPO / "examples" / "wordcount"
#: Where the README's screenshots are written when set (``docs``); else the test's tmp dir.
SCREENSHOTS_ENV = "NIMBUS_UI_SCREENSHOTS"
WAIT_MS = 30_000

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"no {CHROMIUM}: deploy/local/bootstrap.sh installs Debian's chromium (as root)",
)


@pytest.fixture(scope="module")
@needs("browser")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def _leader_of(url: str) -> dict[str, Any] | None:
    leader: dict[str, Any] | None = (_get(url + "api/v1/cluster")[1] or {}).get("leader")
    return leader


def _post_status(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}"), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def _submit_wordcount(seeds: list[str], tmp_path: Path) -> None:
    path = make_package(
        {"topology.py": (EXAMPLE / "topology.py").read_bytes()}, tmp_path / "wordcount.zip"
    )
    with NimbusClient(seeds) as client:
        submit(client, path, "wordcount", num_workers=2)


def _holders(page: Any) -> list[str]:
    bars = page.locator("#epochs-timeline rect.term-bar")
    pairs = [
        (int(bars.nth(i).get_attribute("data-epoch")), bars.nth(i).get_attribute("data-holder"))
        for i in range(bars.count())
    ]
    return [holder for _, holder in sorted(pairs)]


@needs_chromium
def test_page_follows_a_leader_kill_live_and_draws_terms_topology_and_zk_loss(
    spawn: Spawn,
    zk_server: ZooKeeperCluster,
    zk_hosts: str,
    tmp_path: Path,
    browser: Any,
) -> None:
    from playwright.sync_api import expect

    shots = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)
    host, port = zk_server.connect_string.split(",")[0].split(":")
    chroot = zk_hosts[zk_hosts.index("/") :]
    proxies = [FaultProxy(host, int(port)).start() for _ in range(3)]
    supervisor: subprocess.Popen[bytes] | None = None
    try:
        ui_ports = [free_port() for _ in proxies]
        replicas: list[Replica] = [
            spawn(
                zookeeper=f"{proxy.address}{chroot}",
                extra=(*sync_flags(), "--ui-port", str(ui_port)),
            )
            for proxy, ui_port in zip(proxies, ui_ports, strict=True)
        ]
        with (tmp_path / "supervisor.log").open("ab") as log:
            supervisor = subprocess.Popen(
                [
                    sys.executable, "-m", "nimbus.cli.cmd_supervisor", "--zookeeper", zk_hosts,
                    "--root", ROOT, "--id", "sup-1", "--host", "127.0.0.1", "--slots", "4",
                    "--heartbeat-interval", "0.5", "--session-timeout", "4", "--no-workers",
                ],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            )  # fmt: skip
        first = wait_for_agreed_leader(replicas, timeout=30)
        _submit_wordcount([r.address for r in replicas], tmp_path)
        index = next(i for i, r in enumerate(replicas) if r.address != first.replica_id)
        viewed, base = replicas[index], f"http://127.0.0.1:{ui_ports[index]}"

        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/")
        expect(page.locator("#leader-address")).to_have_text(first.replica_id, timeout=WAIT_MS)
        expect(page.locator("#leader-epoch")).to_have_text(str(first.epoch))
        expect(page.locator("#served-by")).to_have_text(viewed.address)
        expect(page.locator("#epochs-timeline rect.term-bar")).to_have_count(1)
        assert _holders(page) == [first.replica_id]
        topology_row = page.locator('#topologies-table tr[data-topology="wordcount"]')
        expect(topology_row).to_contain_text("ACTIVE", timeout=WAIT_MS)
        expect(topology_row).to_contain_text("2/2", timeout=WAIT_MS)
        supervisor_row = page.locator('#supervisors-table tr[data-supervisor="sup-1"]')
        expect(supervisor_row).to_contain_text("2 used, 2 free", timeout=WAIT_MS)
        expect(page.locator("#zk-banner")).to_be_hidden()

        # The topology page: its graph comes from the package held by this replica.
        topology = browser.new_page(viewport={"width": 1280, "height": 900})
        topology.goto(f"{base}/topologies/wordcount")
        nodes = topology.locator("#component-graph g.node")
        expect(nodes).to_have_count(4, timeout=90_000)
        kinds = {
            nodes.nth(i).get_attribute("data-name"): nodes.nth(i).get_attribute("data-kind")
            for i in range(4)
        }
        assert kinds == {"sentences": "spout", "split": "bolt", "count": "bolt", "out": "sink"}
        edges = topology.locator("#component-graph g.edge")
        found = {
            (e.get_attribute("data-source"), e.get_attribute("data-target")): (
                e.get_attribute("data-grouping"),
                e.text_content(),
            )
            for e in (edges.nth(i) for i in range(edges.count()))
        }
        assert found == {
            ("sentences", "split"): ("shuffle", "shuffle"),
            ("split", "count"): ("fields", "fields [word]"),
            ("count", "out"): ("global", "global"),
        }
        ages = topology.locator("#workers-table td.heartbeat-age")
        expect(ages).to_have_count(2, timeout=WAIT_MS)
        expect(ages.first).to_have_text(re.compile(r"^\d+s$"), timeout=WAIT_MS)
        topology.screenshot(path=str(shots / "ui-topology.png"), full_page=True)
        topology.close()

        # SIGKILL the leader: the open page shows the successor and its epoch by itself.
        page.evaluate("window.__sameDocument = true")
        leader = next(r for r in replicas if r.address == first.replica_id)
        leader.send(signal.SIGKILL)
        survivors = [r for r in replicas if r is not leader]
        second = wait_for_agreed_leader(survivors, timeout=30, newer_than=first.epoch)
        expect(page.locator("#leader-address")).to_have_text(second.replica_id, timeout=WAIT_MS)
        expect(page.locator("#leader-epoch")).to_have_text(str(second.epoch))
        assert second.epoch > first.epoch
        assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
        expect(page.locator("#epochs-timeline rect.term-bar")).to_have_count(2, timeout=WAIT_MS)
        assert _holders(page) == [first.replica_id, second.replica_id]
        expect(page.locator("#epochs-timeline rect.term-bar.current")).to_have_attribute(
            "data-holder", second.replica_id
        )
        expect(page.locator("#replicas-table tbody tr")).to_have_count(2, timeout=WAIT_MS)
        page.screenshot(path=str(shots / "ui-cluster.png"), full_page=True)

        # The JSON API tells the same, and nothing but GET is served.
        status, cluster = _get(f"{base}/api/v1/cluster")
        assert status == 200
        assert cluster["leader"]["address"] == second.replica_id
        assert cluster["leader"]["epoch"] == second.epoch
        # Who leads next (``nimbus handover`` without --to): the other survivor, queued.
        follower = next(r.address for r in survivors if r.address != second.replica_id)
        assert cluster["next_in_line"] == follower
        expect(page.locator("#next-in-line")).to_have_text(follower, timeout=WAIT_MS)
        assert {(r["address"], r["is_leader"]) for r in cluster["replicas"]} == {
            (r.address, r.address == second.replica_id) for r in survivors
        }
        assert [(t["name"], t["status"]) for t in cluster["topologies"]] == [
            ("wordcount", "ACTIVE")
        ]
        assert _post_status(f"{base}/api/v1/cluster") == 405
        assert _get(f"{base}/api/v1/topologies/nosuch")[0] == 404

        # Cut the viewed replica off ZooKeeper: its page says so, still without a reload.
        proxies[index].blackhole()
        expect(page.locator("#zk-banner")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#zk-banner")).to_contain_text("lost ZooKeeper")
        assert page.evaluate("window.__sameDocument === true")
        page.close()
    finally:
        if supervisor is not None:
            supervisor.send_signal(signal.SIGTERM)
            supervisor.wait(30)
        for proxy in proxies:
            proxy.stop()


def test_nimbus_dev_prints_a_web_ui_address_per_replica_that_serves_the_cluster() -> None:
    proc, lines = nimbus_dev("--replicas", "2", "--supervisors", "0")
    seen: list[str] = []

    def running() -> bool:
        while not lines.empty():
            seen.append(lines.get())
        return any(line.startswith("running;") for line in seen)

    try:
        wait_until(running, timeout=90, message="nimbus dev to start")
        replica_lines = [line for line in seen if line.startswith("nimbus replica")]
        urls = [m.group(1) for m in map(re.compile(r"web UI (http://\S+/)").search, seen) if m]
        assert len(replica_lines) == 2 and len(urls) == 2, "".join(seen)
        leader = re.search(r"^leader: (\S+) \(epoch (\d+)\)", "".join(seen), re.M)
        assert leader is not None, "".join(seen)
        for url in urls:
            cluster = wait_until(functools.partial(_leader_of, url), timeout=30)
            assert cluster is not None
            assert (cluster["address"], cluster["epoch"]) == (leader[1], int(leader[2]))
            with urllib.request.urlopen(url, timeout=5) as page:
                assert b'<main id="main">' in page.read()
    finally:
        stop_process(proc, 60)


def test_terms_end_where_the_next_begins_and_only_a_live_holder_is_current() -> None:
    history = {
        str(n): records.EpochRecord(epoch=n, holder=f"h{n}:1", started_ms=1000 * n)
        for n in (2, 1, 3)
    }
    live = LeaderInfo("h3:1", 3, "/lock/n3", 3000)
    shown = terms(history, live, now_ms=4500)
    assert [(t["epoch"], t["holder"], t["ended_ms"], t["current"]) for t in shown] == [
        (1, "h1:1", 2000, False),
        (2, "h2:1", 3000, False),
        (3, "h3:1", None, True),
    ]
    assert [t["length_s"] for t in shown] == [1.0, 1.0, 1.5]
    # The holder of the newest term died and nobody leads: its end is unknown, not "now".
    orphaned = terms(history, None, now_ms=4500)[-1]
    assert (orphaned["current"], orphaned["ended_ms"]) == (False, None)


def test_a_graph_missing_from_the_record_is_built_from_the_held_package_sandboxed(
    tmp_path: Path,
) -> None:
    store = CodeStore(tmp_path / "code", max_package_bytes=1 << 20)
    made = {
        name: make_package({"topology.py": body}, tmp_path / f"{name}.zip")
        for name, body in (
            ("wordcount", (EXAMPLE / "topology.py").read_bytes()),
            ("broken", b"def build():\n    return None\n"),
        )
    }
    digests = {
        name: store.write([path.read_bytes()], expected_digest=None).digest
        for name, path in made.items()
    }
    changed = threading.Event()
    graphs = GraphCache(store, on_ready=changed.set)
    try:
        assert graphs.get(digests["wordcount"])["status"] == "loading"
        ready = wait_until(
            lambda: graphs.get(digests["wordcount"])["status"] == "ready", timeout=60
        )
        assert ready
        # "ready" is published just before the callback runs.
        wait_until(changed.is_set, timeout=5, message="the on_ready callback")
        components = graphs.get(digests["wordcount"])["components"]
        shape = [(c["name"], c["kind"], [i["grouping"] for i in c["inputs"]]) for c in components]
        assert shape == [
            ("sentences", "spout", []),
            ("split", "bolt", ["shuffle"]),
            ("count", "bolt", ["fields"]),
            ("out", "sink", ["global"]),
        ]
        broken = wait_until(
            lambda: (
                graphs.get(digests["broken"])["status"] != "loading"
                and graphs.get(digests["broken"])
            ),
            timeout=60,
        )
        assert broken["status"] == "unavailable"
        assert "NoneType" in broken["reason"], broken
        # Code this replica does not hold yet is not written off: it is asked for again.
        changed.clear()
        missing = "0" * 64
        assert graphs.get(missing)["status"] == "loading"
        wait_until(changed.is_set, timeout=30, message="the missing package's verdict")
        assert graphs.get(missing)["status"] == "loading"
    finally:
        graphs.stop()
