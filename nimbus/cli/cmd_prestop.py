"""``nimbus prestop``: a pod's preStop hook (deploy/kubernetes/nimbus-statefulset.yaml).

Run inside the replica's own pod before the kubelet sends SIGTERM. A follower does
nothing; the leader hands its term over (``nimbus handover``) to a replica already on
the StatefulSet's update revision (``nimbus.server.prestop``), else to the next in line,
so a rolling update moves leadership once instead of once per old pod. Then it waits
``--drain`` seconds, for endpoint controllers to stop sending calls here. It exits 0
when there was nothing to do or the handover was done, 1 when a handover failed (the
kubelet records the hook's failure as an event and stops the pod all the same: SIGTERM's
own release of the lock is the fallback).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from cluster.envargs import add_env_flag
from cluster.errors import NimbusError
from cluster.security.client import add_client_flags
from nimbus.client import NimbusCallError, NimbusClient
from nimbus.server.podlabel import PodApi
from nimbus.server.prestop import Choice, choose, read_rollout

#: Refusals a handover to a named replica may meet that the next in line would not.
_TARGET_REFUSED = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)

ChooseTarget = Callable[[Sequence[str]], Choice]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "prestop",
        help="a pod's preStop hook: the leader hands over to an updated replica",
    )
    add_env_flag(p, "--seeds", default="127.0.0.1:6627", help="HOST:PORT of this replica")
    add_client_flags(p)
    add_env_flag(p, "--advertise", required=True, help="this replica's id (HOST:PORT)")
    p.add_argument(
        "--pod", default=os.environ.get("POD_NAME", ""), help="this pod's name [env POD_NAME]"
    )
    p.add_argument("--drain", type=float, default=2.0, help="seconds to wait at the end")
    p.add_argument(
        "--timeout", type=float, default=20.0, help="seconds the handover may take (default 20)"
    )
    p.set_defaults(func=run_prestop)


def kubernetes_target(pod: str) -> ChooseTarget:
    """The choice from the Kubernetes API; the next in line when it cannot tell."""

    def target(replicas: Sequence[str]) -> Choice:
        try:
            rollout = read_rollout(PodApi.in_cluster(pod))
        except (NimbusError, OSError, ValueError) as e:
            return Choice("", f"the Kubernetes API could not tell ({e}): the next in line")
        return choose(rollout, pod, replicas)

    return target


def prestop(client: NimbusClient, own: str, target: ChooseTarget) -> str:
    """Hand over if ``own`` leads; what was done, for the log. Raises ``NimbusError``."""
    leader = client.leader().replica_id
    if leader != own:
        return f"{own} does not lead ({leader} does): nothing to hand over"
    choice = target([n.address for n in client.nimbuses().nimbuses])
    try:
        reply = client.handover(choice.to)
    except NimbusCallError as e:
        if not choice.to or e.code not in _TARGET_REFUSED:
            raise
        refused = f"{choice.to} refused ({e}), "
        choice = Choice("", "the next in line")
        reply = client.handover()
        return f"handed over to {reply.address} (epoch {reply.epoch}): {refused}{choice.why}"
    return f"handed over to {reply.address} (epoch {reply.epoch}): {choice.why}"


def run_prestop(args: argparse.Namespace) -> int:
    code = 0
    try:
        with NimbusClient(args.seeds, deadline=args.timeout) as client:
            print(f"nimbus prestop: {prestop(client, args.advertise, kubernetes_target(args.pod))}")
    except (NimbusError, ValueError) as e:
        print(f"nimbus prestop: no handover: {e}", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    time.sleep(max(0.0, args.drain))  # the endpoints' pace, not a synchronisation
    return code
