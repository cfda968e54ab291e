"""``nimbus leader``, ``nimbus nimbuses`` and ``nimbus cluster``: who leads, who is there."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from cluster.api import pb, records
from cluster.envargs import add_env_flag
from cluster.security.client import add_client_flags
from nimbus.cli.asking import ask
from nimbus.cli.cmd_topology import topology_row
from nimbus.client import NimbusClient


def _common(p: argparse.ArgumentParser) -> None:
    add_env_flag(p, "--seeds", required=True, help="HOST:PORT[,HOST:PORT...] of any replicas")
    add_client_flags(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds the call may take (default 30)"
    )


def register(sub: Any) -> None:
    p = sub.add_parser("leader", help="print the current leader")
    _common(p)
    p.set_defaults(func=run_leader)
    q = sub.add_parser("nimbuses", help="list every replica with its role")
    _common(q)
    q.set_defaults(func=run_nimbuses)
    c = sub.add_parser("cluster", help="replicas, supervisors and topologies in one view")
    _common(c)
    c.set_defaults(func=run_cluster)
    h = sub.add_parser(
        "handover",
        help="hand leadership to a queued replica (planned: before stopping the leader)",
    )
    add_env_flag(h, "--seeds", required=True, help="HOST:PORT[,HOST:PORT...] of any replicas")
    add_client_flags(h)
    h.add_argument("--to", default="", help="HOST:PORT of the replica to lead (default: next)")
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.add_argument(
        "--timeout", type=float, default=None, help="seconds the call may take (default 30)"
    )
    h.set_defaults(func=run_handover)


def run_handover(args: argparse.Namespace) -> int:
    """Returns once a new term began; exit 1 with the reason when refused."""
    reply = ask(args, "handover", lambda client: client.handover(args.to))
    if reply is None:
        return 1
    if args.json:
        print(json.dumps({"address": reply.address, "epoch": reply.epoch}))
    else:
        print(f"leader {reply.address} epoch {reply.epoch}")
    if args.to and reply.address != args.to:
        print(f"nimbus handover: {reply.address} took office, not {args.to}", file=sys.stderr)
        return 1
    return 0


def run_leader(args: argparse.Namespace) -> int:
    reply = ask(args, "leader: no leader known", NimbusClient.leader)
    if reply is None:
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "address": reply.replica_id,
                    "host": reply.host,
                    "port": reply.port,
                    "epoch": reply.epoch,
                    "responder": reply.responder,
                }
            )
        )
    else:
        print(f"leader {reply.replica_id} epoch {reply.epoch} (answered by {reply.responder})")
    return 0


def run_nimbuses(args: argparse.Namespace) -> int:
    reply = ask(args, "nimbuses", NimbusClient.nimbuses)
    if reply is None:
        return 1
    rows = [_nimbus_row(n) for n in reply.nimbuses]
    if args.json:
        print(json.dumps(rows))
        return 0
    header = f"{'ADDRESS':<24} {'ROLE':<9} {'EPOCH':>6} {'UPTIME':>9} {'LAG':>4}"
    print(header)
    for r in rows:
        print(
            f"{r['address']:<24} {r['role']:<9} {r['epoch']:>6} "
            f"{r['uptime_s']:>8}s {r['code_sync_lag']:>4}"
        )
    return 0


def _nimbus_row(n: pb.NimbusInfo) -> dict[str, Any]:
    return {
        "address": n.address,
        "is_leader": n.is_leader,
        "role": records.NimbusRole.Name(n.role),
        "epoch": n.epoch,
        "uptime_s": round(n.uptime_s, 1),
        "code_sync_lag": n.code_sync_lag,
        "version": n.version,
    }


def run_cluster(args: argparse.Namespace) -> int:
    reply = ask(args, "cluster", NimbusClient.cluster_summary)
    if reply is None:
        return 1
    now_ms = time.time() * 1000
    view = {
        "leader_epoch": reply.leader_epoch,
        "nimbuses": [_nimbus_row(n) for n in reply.nimbuses],
        "supervisors": [
            {
                "id": s.supervisor_id,
                "host": s.host,
                "slots_total": s.slots_total,
                "slots_used": s.slots_used,
                "heartbeat_age_s": (  # None: it never reported one
                    round(max(0.0, now_ms - s.heartbeat_ms) / 1000, 1) if s.heartbeat_ms else None
                ),
            }
            for s in reply.supervisors
        ],
        "topologies": [topology_row(t) for t in reply.topologies],
    }
    if args.json:
        print(json.dumps(view))
        return 0
    print(f"leader epoch {view['leader_epoch']}")
    for section in ("nimbuses", "supervisors", "topologies"):
        rows: list[dict[str, Any]] = view[section]  # type: ignore[assignment]
        print(f"{section} ({len(rows)})")
        for row in rows:
            print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    return 0
