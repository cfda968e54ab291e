"""Merge the fault rows of one chaos results file into another of the same bench.

A row measured later (a new fault, or one re-measured after a change) joins the file
that the README and the issues quote, instead of replacing the whole file and the rows it
did not run. The rows keep their own figures; ``merged`` records where each came from.

    python bench/merge_results.py bench/results/chaos-cli-T4-slow-disk.json \
        bench/results/chaos-cli.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


class MergeError(ValueError):
    """The two files cannot be merged: they measured different things."""


def merge(source: dict[str, Any], target: dict[str, Any], source_name: str) -> dict[str, Any]:
    """``target`` with ``source``'s fault rows (and their trials) in place of its own."""
    key = "session_timeout_s"  # rows of another T measure something else
    if key in source and key in target and source[key] != target[key]:
        raise MergeError(f"{key} differs: {source[key]} in {source_name}, {target[key]}")
    faults = dict(source.get("faults") or {})
    if not faults:
        raise MergeError(f"{source_name} has no fault rows")
    merged = dict(target)
    merged["faults"] = {**target.get("faults", {}), **faults}
    kept = [t for t in target.get("trial_details", []) if t.get("fault") not in faults]
    merged["trial_details"] = kept + list(source.get("trial_details", []))
    note = {
        "from": source_name,
        "faults": sorted(faults),
        "machine": source.get("machine"),
        "zookeeper_force_sync": source.get("zookeeper_force_sync"),
        "notes": source.get("notes"),
        "failed_calls": sum(int(r.get("failed_calls", 0)) for r in faults.values()),
    }
    merged["merged"] = [m for m in target.get("merged", []) if set(m["faults"]) - set(faults)] + [
        note
    ]
    merged["failed_calls"] = sum(int(r.get("failed_calls", 0)) for r in merged["faults"].values())
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="results JSON with the rows to bring in")
    parser.add_argument("target", type=Path, help="results JSON to merge them into")
    args = parser.parse_args(argv)
    try:
        source = json.loads(args.source.read_text())
        target = json.loads(args.target.read_text())
        merged = merge(source, target, args.source.name)
    except (OSError, json.JSONDecodeError, MergeError) as e:
        print(f"cannot merge {args.source} into {args.target}: {e}", file=sys.stderr)
        return 2
    args.target.write_text(json.dumps(merged, indent=2) + "\n")
    md_source, md_target = args.source.with_suffix(".md"), args.target.with_suffix(".md")
    if md_source.exists() and md_target.exists():
        text = md_target.read_text().split(f"\n\n## Rows merged from {md_source.name}\n")[0]
        body = md_source.read_text().split("\n", 1)[1].lstrip()
        md_target.write_text(f"{text.rstrip()}\n\n## Rows merged from {md_source.name}\n\n{body}")
    print(json.dumps({"merged": sorted(source.get("faults", {})), "into": str(args.target)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
