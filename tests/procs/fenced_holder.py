"""A leader as a real process, for tests that pause it with SIGSTOP.

Takes the lock and office, prints one JSON line ``{"lock_node", "epoch"}``, then obeys
commands on stdin: ``write N PREFIX [after-new-session]`` attempts N fenced creates under
``<root>/data`` and prints one JSON summary line; ``quit`` exits. ``--raw`` makes it a
zombie that never learns it was deposed: no state listener, and a fresh token per attempt, so every
attempt really reaches ZooKeeper and only the server-side check can stop it.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from kazoo.client import KazooState
from kazoo.exceptions import NoNodeError
from kazoo.recipe.lock import Lock

from cluster.factory import make_kazoo_client
from cluster.paths import Paths
from fencing import (
    CancelReason,
    FencedWriter,
    LeadershipToken,
    NotLeaderError,
    WriteOutcomeUnknown,
    ensure_folders,
)
from fencing.lease import Heartbeat, Lease
from fencing.office import take_office


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args()

    client = make_kazoo_client(args.hosts, session_timeout=args.session_timeout)
    connected = threading.Event()
    client.start(timeout=15)
    connected.set()
    ensure_folders(client, Paths(args.root).folders())
    lock = Lock(client, Paths(args.root).leader_lock, identifier="holder")
    lock.acquire(timeout=30)
    lock_node = f"{lock.path}/{lock.node}"
    epoch = take_office(
        client,
        Paths(args.root),
        lock_node=lock_node,
        holder="holder",
        now_ms=lambda: int(time.time() * 1000),
        timeout=args.session_timeout,
    )
    token = LeadershipToken(lock_node, epoch)
    first_session = client.client_id[0]
    lease = Lease(args.session_timeout * 2 / 3)
    heartbeat = Heartbeat(client, lease, interval=args.session_timeout / 6)
    if not args.raw:
        heartbeat.beat()
        heartbeat.start()

    def on_state(state: str) -> None:
        if state == KazooState.CONNECTED:
            connected.set()
        else:
            connected.clear()
            if not args.raw:
                token.cancel(CancelReason.DISCONNECTED, str(state))

    client.add_listener(on_state)
    print(json.dumps({"lock_node": lock_node, "epoch": epoch}), flush=True)

    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        count, prefix = int(words[1]), words[2]
        after_new_session = "after-new-session" in words[3:]
        summary = {"attempts": 0, "applied": 0, "not_leader": 0, "server_refused": 0, "unknown": 0}
        for i in range(count):
            if args.raw and after_new_session:
                # A zombie: once kazoo has a new session, write as if still leader.
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not (
                    connected.wait(1) and (client.client_id or (first_session,))[0] != first_session
                ):
                    time.sleep(0.02)  # connected, but still on the old session
            if args.raw:
                token = LeadershipToken(lock_node, epoch)
            writer = FencedWriter(
                client,
                token,
                timeout=args.session_timeout,
                lease_valid=None if args.raw else lease.valid,
            )
            summary["attempts"] += 1
            try:
                writer.create(f"{args.root}/data/{prefix}-{i}")
                summary["applied"] += 1
            except NotLeaderError as e:
                summary["not_leader"] += 1
                if isinstance(e.__cause__, NoNodeError):
                    summary["server_refused"] += 1
            except WriteOutcomeUnknown:
                summary["unknown"] += 1
        print(json.dumps(summary), flush=True)
    heartbeat.stop()
    client.stop()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
