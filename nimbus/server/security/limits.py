"""Limits on what a request may ask for, checked at the API's edge before any work.

The servicer's handlers already refuse malformed names, digests and request ids; these
are the bounds on the rest: the submit header's free-form fields (owner, the topology's
config JSON, sizes, worker counts) and the counts and waits of lifecycle calls. Each
refusal is an ``INVALID_ARGUMENT`` that names the field and the limit, and comes before
anything is stored or written.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from cluster.api import pb
from cluster.apierror import ApiError

MAX_CONFIG_BYTES = 64 * 1024
MAX_CONFIG_KEYS = 1024
MAX_CONFIG_DEPTH = 8
MAX_OWNER_CHARS = 256
MAX_WORKERS = 4096
MAX_PARALLELISM = 4096
MAX_COMPONENTS = 1024
MAX_WAIT_S = 7 * 24 * 3600
CONFIG_KEY_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def _invalid(message: str) -> ApiError:
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _shown(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def check_topology_config(config_json: str) -> dict[str, Any]:
    """A JSON object of at most 64 KiB, keys like ``topology.workers``, nesting <= 8."""
    if not config_json.strip():
        return {}
    size = len(config_json.encode())
    if size > MAX_CONFIG_BYTES:
        raise _invalid(f"topology config is {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit")
    try:
        value = json.loads(config_json)
    except (ValueError, RecursionError) as e:
        raise _invalid(f"topology config is not valid JSON: {str(e)[:120]}") from e
    if not isinstance(value, dict):
        raise _invalid(f"topology config must be a JSON object, got {type(value).__name__}")
    if len(value) > MAX_CONFIG_KEYS:
        raise _invalid(
            f"topology config has {len(value)} keys, over the limit of {MAX_CONFIG_KEYS}"
        )
    for key in value:
        if not CONFIG_KEY_RE.match(key):
            raise _invalid(f"topology config key {_shown(key)} is not 1-128 of A-Z a-z 0-9 . _ -")
    depth = _depth(value)
    if depth > MAX_CONFIG_DEPTH:
        raise _invalid(f"topology config nests {depth} deep, over the limit of {MAX_CONFIG_DEPTH}")
    return value


def _depth(value: Any) -> int:
    """Nesting depth without recursion (a hostile document could be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest - 1


def check_submit_header(header: pb.SubmitHeader) -> None:
    """Bounds on a submit header's fields (name, digest and request id are checked later)."""
    if len(header.owner) > MAX_OWNER_CHARS or not header.owner.isprintable():
        raise _invalid(f"owner {_shown(header.owner)} must be printable, at most {MAX_OWNER_CHARS}")
    if header.package_size < 0:
        raise _invalid(f"package size must be >= 0 bytes, got {header.package_size}")
    if not 0 <= header.num_workers <= MAX_WORKERS:
        raise _invalid(
            f"workers must be between 1 and {MAX_WORKERS} (0: one), got {header.num_workers}"
        )
    check_topology_config(header.config_json)


def check_wait(wait_s: int) -> None:
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise _invalid(f"wait must be between 0 and {MAX_WAIT_S} seconds, got {wait_s}")


def check_kill(request: pb.KillTopologyRequest) -> None:
    check_wait(request.wait_s)


def check_rebalance(request: pb.RebalanceTopologyRequest) -> None:
    check_wait(request.wait_s)
    if not 0 <= request.num_workers <= MAX_WORKERS:
        raise _invalid(
            f"workers must be between 1 and {MAX_WORKERS} (0: unchanged), got {request.num_workers}"
        )
    if len(request.component_parallelism) > MAX_COMPONENTS:
        raise _invalid(f"parallelism given for over {MAX_COMPONENTS} components")
    for component, parallelism in request.component_parallelism.items():
        if parallelism > MAX_PARALLELISM:
            raise _invalid(
                f"parallelism of {_shown(component)} is {parallelism}, over the limit of "
                f"{MAX_PARALLELISM}"
            )


Q = TypeVar("Q")
R = TypeVar("R")


def guarded(check: Callable[[Q], None], call: Callable[[Q], R]) -> Callable[[Q], R]:
    """``call`` preceded by ``check`` of its request."""

    def checked(request: Q) -> R:
        check(request)
        return call(request)

    return checked


def checked_submit(
    requests: Iterator[pb.SubmitTopologyRequest],
) -> Iterator[pb.SubmitTopologyRequest]:
    """The stream with its header checked first (a stream without one is left to fail later)."""
    first = next(requests, None)
    if first is None:
        return iter(())
    if first.WhichOneof("item") == "header":
        check_submit_header(first.header)
    return itertools.chain([first], requests)
