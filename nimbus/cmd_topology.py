"""``nimbus submit`` and ``nimbus describe``."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from leader.client import NimbusClient
from nimbus.api import pb, records
from nimbus.envargs import add_env_flag
from nimbus.errors import NimbusError

CHUNK = 1024 * 1024


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="upload a topology package and activate it")
    p.add_argument("package", help="a zip with topology.py at its root")
    p.add_argument("--name", required=True)
    p.add_argument("--config-json", default="{}", help="topology config as a JSON object")
    p.add_argument("--workers", type=int, default=1)
    add_env_flag(p, "--seeds", required=True, help="HOST:PORT[,HOST:PORT...] of any replicas")
    p.add_argument("--timeout", type=float, default=600.0)
    p.set_defaults(func=run_submit)
    d = sub.add_parser("describe", help="one topology: status, epoch, digest, code replicas")
    d.add_argument("name")
    add_env_flag(d, "--seeds", required=True, help="HOST:PORT[,HOST:PORT...] of any replicas")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=run_describe)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def run_submit(args: argparse.Namespace) -> int:
    package = Path(args.package)
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
        with NimbusClient(args.seeds, attempts=5, deadline=args.timeout) as client:
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
    try:
        with NimbusClient(args.seeds) as client:
            detail = client.describe(args.name)
    except (NimbusError, ValueError) as e:
        print(f"nimbus describe: {e}", file=sys.stderr)
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
    }
    if args.json:
        print(json.dumps(view))
    else:
        for key, value in view.items():
            print(f"{key:>14}: {value}")
    return 0
