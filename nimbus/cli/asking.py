"""One call of a command that asks the cluster: a client of ``--seeds`` bounded by
``--timeout``. A failure is said on stderr as ``nimbus VERB: why`` and the command exits 1,
so every command words and exits alike when no replica can answer."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TypeVar

from cluster.errors import NimbusError
from nimbus.client import NimbusClient

T = TypeVar("T")


def ask(args: argparse.Namespace, verb: str, call: Callable[[NimbusClient], T]) -> T | None:
    """``call`` on a client of ``args.seeds``; None, once the reason is on stderr, when it
    (or building its request) failed."""
    try:
        with NimbusClient(args.seeds, deadline=args.timeout) as client:
            return call(client)
    except (NimbusError, ValueError) as e:
        print(f"nimbus {verb}: {e}", file=sys.stderr)
        return None
