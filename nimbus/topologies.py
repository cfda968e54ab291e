"""Read-only views of topologies for ``ListTopologies`` and ``GetTopology`` (any replica)."""

from __future__ import annotations

import time

import grpc
from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from code_sync.state import read_holders_of, read_storms
from leader.paths import Paths
from nimbus.api import pb, records
from nimbus.apierror import ApiError
from nimbus.names import check_name


def _summary(
    client: KazooClient, paths: Paths, topology_id: str, base: records.StormBase
) -> pb.TopologySummary:
    holders = read_holders_of(client, paths, topology_id)
    now_ms = int(time.time() * 1000)
    return pb.TopologySummary(
        id=topology_id,
        name=base.name,
        status=base.status,
        epoch=base.epoch,
        digest=base.digest,
        launch_time_ms=base.launch_time_ms,
        uptime_s=max(0.0, (now_ms - base.launch_time_ms) / 1000.0) if base.launch_time_ms else 0,
        num_workers=base.num_workers,
        code_replicas=[r for r in holders.replicas if holders.digest == base.digest],
        owner=base.owner,
    )


def list_topologies(client: KazooClient, root: str) -> pb.ListTopologiesResponse:
    paths = Paths(root)
    storms = read_storms(client, paths)
    return pb.ListTopologiesResponse(
        topologies=[_summary(client, paths, tid, base) for tid, base in sorted(storms.items())]
    )


def describe(client: KazooClient, root: str, name: str) -> pb.TopologyDetail:
    paths = Paths(root)
    check_name(name)
    try:
        topology_id = client.get(paths.name(name))[0].decode()
        base = records.StormBase.FromString(client.get(paths.storm(topology_id))[0])
    except NoNodeError as e:
        raise ApiError(grpc.StatusCode.NOT_FOUND, f"no live topology named {name!r}") from e
    except (DecodeError, UnicodeDecodeError) as e:
        raise ApiError(grpc.StatusCode.DATA_LOSS, f"the record of {name!r} is damaged") from e
    return pb.TopologyDetail(
        summary=_summary(client, paths, topology_id, base),
        component_parallelism=dict(base.component_parallelism),
        config_json=base.config_json,
    )
