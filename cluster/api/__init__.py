"""The one place the rest of the code imports the Nimbus API and its records from.

The stubs in ``cluster/api/v1`` are generated from ``proto/`` by ``python proto/generate.py``
and checked fresh by ``tests/test_proto.py``. Importing them through this module keeps the
``_pb2`` file names, and a future ``v2``, out of every other file::

    from cluster.api import pb, records, rpc

    stub = rpc.NimbusStub(channel)
    reply = stub.GetLeaderAddress(pb.GetLeaderAddressRequest())
    base = records.StormBase(name="wc", status=records.ACTIVE, epoch=reply.epoch)

- ``pb``: request and response messages of the ``Nimbus`` service (``nimbus.proto``).
- ``records``: what is stored in ZooKeeper, and the ``NimbusRole`` / ``TopologyStatus``
  enums, which responses use too (``records.proto``).
- ``rpc``: ``NimbusStub``, ``NimbusServicer``, ``add_NimbusServicer_to_server``.
"""

from cluster.api.v1 import nimbus_pb2 as pb
from cluster.api.v1 import nimbus_pb2_grpc as rpc
from cluster.api.v1 import records_pb2 as records

#: Fully qualified gRPC service name, e.g. for the health service or server reflection.
SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Nimbus"].full_name

__all__ = ["SERVICE_NAME", "pb", "records", "rpc"]
