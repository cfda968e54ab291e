"""``nimbus submit`` and ``nimbus describe``."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from cluster.api import pb, records
from cluster.envargs import add_env_flag
from cluster.errors import NimbusError
from cluster.security.client import add_client_flags
from code_sync.package import make_package
from nimbus.cli.asking import ask
from nimbus.client import NimbusClient
from nimbus.views import component_metrics

CHUNK = 1024 * 1024


TIMEOUT_HELP = (
    "seconds the whole call may take, retries through a failover included "
    "(default: 30 for changes, 90 plus upload time for a submit; 10 for reads)"
)


def at_least_one(text: str) -> int:
    """An argparse type: a count of workers or executors, 1 or more."""
    try:
        value = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"a whole number is needed, got {text!r}") from e
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _client_flags(p: argparse.ArgumentParser) -> None:
    add_env_flag(p, "--seeds", required=True, help="HOST:PORT[,HOST:PORT...] of any replicas")
    add_client_flags(p)
    p.add_argument("--timeout", type=float, default=None, help=TIMEOUT_HELP)


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="upload a topology package and activate it")
    p.add_argument("package", help="a zip, or a folder, with topology.py at its root")
    p.add_argument("--name", required=True)
    p.add_argument("--config-json", default="{}", help="topology config as a JSON object")
    p.add_argument("--workers", type=at_least_one, default=1)
    _client_flags(p)
    p.set_defaults(func=run_submit)
    d = sub.add_parser("describe", help="one topology: status, epoch, digest, code replicas")
    d.add_argument("name")
    _client_flags(d)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=run_describe)
    ls = sub.add_parser("list", help="every topology with its status")
    _client_flags(ls)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)
    for command, help_text in (
        ("kill", "kill a topology: KILLED now, removed after --wait seconds"),
        ("activate", "resume a deactivated topology"),
        ("deactivate", "pause a topology's spouts"),
        ("rebalance", "change a topology's workers or parallelism"),
    ):
        c = sub.add_parser(command, help=help_text)
        c.add_argument("name")
        _client_flags(c)
        c.add_argument("--json", action="store_true")
        if command in ("kill", "rebalance"):
            c.add_argument("--wait", type=int, default=0, help="seconds (default 0)")
        if command == "rebalance":
            c.add_argument(
                "--workers", type=at_least_one, default=None,
                help="new number of workers, at least 1 (default: unchanged)",
            )  # fmt: skip
            c.add_argument(
                "--parallelism", action="append", default=[], metavar="COMPONENT=N",
                help="new parallelism of one component (repeatable)",
            )  # fmt: skip
        c.set_defaults(func=run_action, command=command)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _zip_folder(folder: Path) -> Path:
    """A package made from a folder (``topology.py`` at its root), as ``pipeline.check``
    accepts one: every regular file but bytecode, deterministic, in a temporary file."""
    files = {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and not path.is_symlink()
    }
    fd, name = tempfile.mkstemp(prefix="nimbus-submit-", suffix=".zip")
    os.close(fd)
    return make_package(files, Path(name))


#: Said when more than one worker is asked for: the others would stand idle.
EXTRA_WORKERS_NOTE = (
    "note: a topology runs as one Spark query in one worker (its parallelism is that "
    "query's partitions); its other {extra} worker slot(s) stay idle. To spread it over "
    "machines, run the supervisors with --spark-master (see README)"
)


def _note_extra_workers(workers: int) -> None:
    if workers > 1:
        print(EXTRA_WORKERS_NOTE.format(extra=workers - 1), file=sys.stderr)


def run_submit(args: argparse.Namespace) -> int:
    _note_extra_workers(args.workers)
    given = Path(args.package)
    if not given.is_dir():
        return _submit(args, given)
    try:
        made = _zip_folder(given)
    except OSError as e:
        print(f"nimbus submit: cannot read {given}: {e}", file=sys.stderr)
        return 2
    try:
        return _submit(args, made)
    finally:
        made.unlink(missing_ok=True)


def _submit(args: argparse.Namespace, package: Path) -> int:
    try:
        size = package.stat().st_size
        json.loads(args.config_json)
    except OSError as e:
        print(f"nimbus submit: cannot read {package}: {e.strerror}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as e:
        print(f"nimbus submit: --config-json is not valid JSON: {e}", file=sys.stderr)
        return 2
    header = pb.SubmitHeader(
        name=args.name,
        config_json=args.config_json,
        expected_digest=_digest(package),
        package_size=size,
        num_workers=args.workers,
    )
    interactive = sys.stderr.isatty()

    def chunks() -> Iterator[bytes]:
        bar = tqdm(total=size, unit="B", unit_scale=True, desc="upload", disable=not interactive)
        sent, reported = 0, -1
        with package.open("rb") as f, bar:
            while block := f.read(CHUNK):
                sent += len(block)
                bar.update(len(block))
                percent = sent * 100 // max(size, 1)
                if not interactive and percent // 25 > reported:
                    reported = percent // 25
                    print(f"uploaded {sent} of {size} bytes ({percent}%)", file=sys.stderr)
                yield block

    try:
        with NimbusClient(args.seeds) as client:
            reply = client.submit(header, chunks, timeout=args.timeout)
    except (NimbusError, ValueError) as e:
        print(f"nimbus submit: {e}", file=sys.stderr)
        return 1
    print(
        f"submitted {reply.topology_id} (epoch {reply.epoch}, digest {reply.digest[:12]}, "
        f"held by {', '.join(reply.code_replicas)})"
    )
    return 0


def run_describe(args: argparse.Namespace) -> int:
    detail = ask(args, "describe", lambda client: client.describe(args.name))
    if detail is None:
        return 1
    s = detail.summary
    view = {
        "id": s.id,
        "name": s.name,
        "status": records.TopologyStatus.Name(s.status),
        "epoch": s.epoch,
        "digest": s.digest,
        "code_replicas": list(s.code_replicas),
        "num_workers": s.num_workers,
        "uptime_s": round(s.uptime_s, 1),
        "failing": s.failing,
        "last_error": s.last_error,
        "worker_restarts": s.worker_restarts,
        "component_parallelism": dict(detail.component_parallelism),
        "components": json.loads(detail.components_json) if detail.components_json else [],
        "workers": [
            {
                "supervisor": w.supervisor_id,
                "slot": w.slot,
                "host": w.host,
                "state": w.state,
                "heartbeat_age_s": round(w.heartbeat_age_s, 1),
                "last_error": w.last_error,
                "failures_in_a_row": w.failures_in_a_row,
                "restarts": w.restarts,
                "log": w.log_path,
                "rows_processed": w.rows_processed,
                "rows_per_s": round(w.rows_per_s, 1),
                "partitioning_note": w.partitioning_note,
                "components": [component_metrics(c) for c in w.components],
            }
            for w in detail.workers
        ],
        "metrics": topology_metrics(detail.workers),
        "errors": [
            {"component": e.component, "message": e.message, "time_ms": e.time_ms}
            for e in detail.errors
        ],
    }
    if args.json:
        print(json.dumps(view))
    else:
        for key, value in view.items():
            shown = json.dumps(value) if isinstance(value, dict | list) else value
            print(f"{key:>21}: {shown}")
    return 0


def topology_metrics(workers: Sequence[pb.WorkerStatus]) -> dict[str, dict[str, Any]]:
    """Per component, summed over the topology's workers (their queries' own counts)."""
    merged: dict[str, dict[str, Any]] = {}
    for w in workers:
        for c in w.components:
            m = merged.setdefault(
                c.component,
                {"rows": 0, "skipped_rows": 0, "rows_per_s": 0.0, "partitions": 0, "late_rows": 0},
            )
            m["rows"] += c.rows
            m["skipped_rows"] += c.skipped_rows
            m["rows_per_s"] = round(m["rows_per_s"] + c.rows_per_s, 1)
            m["partitions"] += c.partitions
            m["late_rows"] += c.late_rows
    return merged


def topology_row(t: pb.TopologySummary) -> dict[str, Any]:
    """One topology as ``nimbus list --json`` and ``nimbus cluster --json`` print it."""
    return {
        "id": t.id,
        "name": t.name,
        "status": records.TopologyStatus.Name(t.status),
        "epoch": t.epoch,
        "num_workers": t.num_workers,
        "code_replicas": len(t.code_replicas),
        "uptime_s": round(t.uptime_s, 1),
        "failing": t.failing,
        "worker_restarts": t.worker_restarts,
        "last_error": t.last_error,
    }


def run_list(args: argparse.Namespace) -> int:
    reply = ask(args, "list", NimbusClient.list_topologies)
    if reply is None:
        return 1
    rows = [topology_row(t) for t in reply.topologies]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(
        f"{'NAME':<24} {'STATUS':<16} {'WORKERS':>7} {'REPLICAS':>8} {'RESTARTS':>8} "
        f"{'ID':<32} LAST ERROR"
    )
    for r in rows:
        status = f"{r['status']} (failing)" if r["failing"] else r["status"]
        print(
            f"{r['name']:<24} {status:<16} {r['num_workers']:>7} {r['code_replicas']:>8} "
            f"{r['worker_restarts']:>8} {r['id']:<32} {r['last_error'][:80]}"
        )
    return 0


def _action_request(args: argparse.Namespace) -> tuple[str, Any]:
    if args.command == "kill":
        return "KillTopology", pb.KillTopologyRequest(name=args.name, wait_s=args.wait)
    if args.command == "rebalance":
        parallelism: dict[str, int] = {}
        for item in args.parallelism:
            component, sep, value = item.partition("=")
            if not sep or not value.isdigit():
                raise ValueError(f"--parallelism takes COMPONENT=N, got {item!r}")
            if int(value) < 1:
                raise ValueError(f"--parallelism {item}: N must be at least 1")
            parallelism[component] = int(value)
        return "RebalanceTopology", pb.RebalanceTopologyRequest(
            name=args.name,
            num_workers=args.workers or 0,  # 0: unchanged
            component_parallelism=parallelism,
            wait_s=args.wait,
        )
    method = "ActivateTopology" if args.command == "activate" else "DeactivateTopology"
    return method, pb.TopologyNameRequest(name=args.name)


def run_action(args: argparse.Namespace) -> int:
    _note_extra_workers(getattr(args, "workers", None) or 0)
    # The request is built inside the call, so a bad flag is reported as any failure is.
    reply = ask(args, args.command, lambda client: client.call_leader(*_action_request(args)))
    if reply is None:
        return 1
    status = records.TopologyStatus.Name(reply.status)
    if args.json:
        print(json.dumps({"id": reply.topology_id, "name": reply.name, "status": status,
                          "epoch": reply.epoch}))  # fmt: skip
    else:
        print(f"{args.command}: {reply.name} ({reply.topology_id}) is {status}")
    return 0
