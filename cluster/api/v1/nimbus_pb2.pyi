from cluster.api.v1 import records_pb2 as _records_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetLeaderAddressRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLeaderAddressResponse(_message.Message):
    __slots__ = ("host", "port", "replica_id", "epoch", "responder", "responder_is_leader")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    replica_id: str
    epoch: int
    responder: str
    responder_is_leader: bool
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., replica_id: _Optional[str] = ..., epoch: _Optional[int] = ..., responder: _Optional[str] = ..., responder_is_leader: _Optional[bool] = ...) -> None: ...

class GetAllNimbusAddressesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NimbusInfo(_message.Message):
    __slots__ = ("address", "host", "port", "role", "is_leader", "epoch", "uptime_s", "code_sync_lag", "version")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    CODE_SYNC_LAG_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    address: str
    host: str
    port: int
    role: _records_pb2.NimbusRole
    is_leader: bool
    epoch: int
    uptime_s: float
    code_sync_lag: int
    version: str
    def __init__(self, address: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., role: _Optional[_Union[_records_pb2.NimbusRole, str]] = ..., is_leader: _Optional[bool] = ..., epoch: _Optional[int] = ..., uptime_s: _Optional[float] = ..., code_sync_lag: _Optional[int] = ..., version: _Optional[str] = ...) -> None: ...

class GetAllNimbusAddressesResponse(_message.Message):
    __slots__ = ("nimbuses", "leader_epoch")
    NIMBUSES_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    nimbuses: _containers.RepeatedCompositeFieldContainer[NimbusInfo]
    leader_epoch: int
    def __init__(self, nimbuses: _Optional[_Iterable[_Union[NimbusInfo, _Mapping]]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class SubmitHeader(_message.Message):
    __slots__ = ("name", "config_json", "expected_digest", "package_size", "client_request_id", "owner", "num_workers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    config_json: str
    expected_digest: str
    package_size: int
    client_request_id: str
    owner: str
    num_workers: int
    def __init__(self, name: _Optional[str] = ..., config_json: _Optional[str] = ..., expected_digest: _Optional[str] = ..., package_size: _Optional[int] = ..., client_request_id: _Optional[str] = ..., owner: _Optional[str] = ..., num_workers: _Optional[int] = ...) -> None: ...

class SubmitTopologyRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: SubmitHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[SubmitHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class SubmitTopologyResponse(_message.Message):
    __slots__ = ("topology_id", "name", "epoch", "digest", "code_replicas")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    CODE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    name: str
    epoch: int
    digest: str
    code_replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topology_id: _Optional[str] = ..., name: _Optional[str] = ..., epoch: _Optional[int] = ..., digest: _Optional[str] = ..., code_replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class KillTopologyRequest(_message.Message):
    __slots__ = ("name", "wait_s", "client_request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    wait_s: int
    client_request_id: str
    def __init__(self, name: _Optional[str] = ..., wait_s: _Optional[int] = ..., client_request_id: _Optional[str] = ...) -> None: ...

class TopologyNameRequest(_message.Message):
    __slots__ = ("name", "client_request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    client_request_id: str
    def __init__(self, name: _Optional[str] = ..., client_request_id: _Optional[str] = ...) -> None: ...

class RebalanceTopologyRequest(_message.Message):
    __slots__ = ("name", "num_workers", "component_parallelism", "wait_s", "client_request_id")
    class ComponentParallelismEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_workers: int
    component_parallelism: _containers.ScalarMap[str, int]
    wait_s: int
    client_request_id: str
    def __init__(self, name: _Optional[str] = ..., num_workers: _Optional[int] = ..., component_parallelism: _Optional[_Mapping[str, int]] = ..., wait_s: _Optional[int] = ..., client_request_id: _Optional[str] = ...) -> None: ...

class HandoverRequest(_message.Message):
    __slots__ = ("to", "client_request_id")
    TO_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    to: str
    client_request_id: str
    def __init__(self, to: _Optional[str] = ..., client_request_id: _Optional[str] = ...) -> None: ...

class HandoverResponse(_message.Message):
    __slots__ = ("address", "epoch")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    address: str
    epoch: int
    def __init__(self, address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class TopologyActionResponse(_message.Message):
    __slots__ = ("topology_id", "name", "status", "epoch")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    name: str
    status: _records_pb2.TopologyStatus
    epoch: int
    def __init__(self, topology_id: _Optional[str] = ..., name: _Optional[str] = ..., status: _Optional[_Union[_records_pb2.TopologyStatus, str]] = ..., epoch: _Optional[int] = ...) -> None: ...

class ListTopologiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopologySummary(_message.Message):
    __slots__ = ("id", "name", "status", "epoch", "digest", "launch_time_ms", "uptime_s", "num_workers", "code_replicas", "owner", "last_error", "failing", "worker_restarts")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    CODE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILING_FIELD_NUMBER: _ClassVar[int]
    WORKER_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    status: _records_pb2.TopologyStatus
    epoch: int
    digest: str
    launch_time_ms: int
    uptime_s: float
    num_workers: int
    code_replicas: _containers.RepeatedScalarFieldContainer[str]
    owner: str
    last_error: str
    failing: bool
    worker_restarts: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., status: _Optional[_Union[_records_pb2.TopologyStatus, str]] = ..., epoch: _Optional[int] = ..., digest: _Optional[str] = ..., launch_time_ms: _Optional[int] = ..., uptime_s: _Optional[float] = ..., num_workers: _Optional[int] = ..., code_replicas: _Optional[_Iterable[str]] = ..., owner: _Optional[str] = ..., last_error: _Optional[str] = ..., failing: _Optional[bool] = ..., worker_restarts: _Optional[int] = ...) -> None: ...

class ListTopologiesResponse(_message.Message):
    __slots__ = ("topologies",)
    TOPOLOGIES_FIELD_NUMBER: _ClassVar[int]
    topologies: _containers.RepeatedCompositeFieldContainer[TopologySummary]
    def __init__(self, topologies: _Optional[_Iterable[_Union[TopologySummary, _Mapping]]] = ...) -> None: ...

class GetTopologyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class TopologyDetail(_message.Message):
    __slots__ = ("summary", "assignment", "errors", "component_parallelism", "config_json", "workers", "components_json")
    class ComponentParallelismEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    summary: TopologySummary
    assignment: _records_pb2.Assignment
    errors: _containers.RepeatedCompositeFieldContainer[_records_pb2.ErrorInfo]
    component_parallelism: _containers.ScalarMap[str, int]
    config_json: str
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    components_json: str
    def __init__(self, summary: _Optional[_Union[TopologySummary, _Mapping]] = ..., assignment: _Optional[_Union[_records_pb2.Assignment, _Mapping]] = ..., errors: _Optional[_Iterable[_Union[_records_pb2.ErrorInfo, _Mapping]]] = ..., component_parallelism: _Optional[_Mapping[str, int]] = ..., config_json: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., components_json: _Optional[str] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("supervisor_id", "slot", "host", "state", "heartbeat_age_s", "last_error", "failures_in_a_row", "restarts", "log_path", "components", "rows_processed", "rows_per_s", "partitioning_note")
    SUPERVISOR_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURES_IN_A_ROW_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    ROWS_PROCESSED_FIELD_NUMBER: _ClassVar[int]
    ROWS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PARTITIONING_NOTE_FIELD_NUMBER: _ClassVar[int]
    supervisor_id: str
    slot: int
    host: str
    state: str
    heartbeat_age_s: float
    last_error: str
    failures_in_a_row: int
    restarts: int
    log_path: str
    components: _containers.RepeatedCompositeFieldContainer[_records_pb2.ComponentMetrics]
    rows_processed: int
    rows_per_s: float
    partitioning_note: str
    def __init__(self, supervisor_id: _Optional[str] = ..., slot: _Optional[int] = ..., host: _Optional[str] = ..., state: _Optional[str] = ..., heartbeat_age_s: _Optional[float] = ..., last_error: _Optional[str] = ..., failures_in_a_row: _Optional[int] = ..., restarts: _Optional[int] = ..., log_path: _Optional[str] = ..., components: _Optional[_Iterable[_Union[_records_pb2.ComponentMetrics, _Mapping]]] = ..., rows_processed: _Optional[int] = ..., rows_per_s: _Optional[float] = ..., partitioning_note: _Optional[str] = ...) -> None: ...

class GetClusterSummaryRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterSummary(_message.Message):
    __slots__ = ("nimbuses", "supervisors", "topologies", "leader_epoch")
    NIMBUSES_FIELD_NUMBER: _ClassVar[int]
    SUPERVISORS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGIES_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    nimbuses: _containers.RepeatedCompositeFieldContainer[NimbusInfo]
    supervisors: _containers.RepeatedCompositeFieldContainer[_records_pb2.SupervisorInfo]
    topologies: _containers.RepeatedCompositeFieldContainer[TopologySummary]
    leader_epoch: int
    def __init__(self, nimbuses: _Optional[_Iterable[_Union[NimbusInfo, _Mapping]]] = ..., supervisors: _Optional[_Iterable[_Union[_records_pb2.SupervisorInfo, _Mapping]]] = ..., topologies: _Optional[_Iterable[_Union[TopologySummary, _Mapping]]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class DownloadCodeRequest(_message.Message):
    __slots__ = ("digest", "offset")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    digest: str
    offset: int
    def __init__(self, digest: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class CodeChunk(_message.Message):
    __slots__ = ("data", "offset", "total_size", "digest")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    total_size: int
    digest: str
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class PushCodeHeader(_message.Message):
    __slots__ = ("topology_id", "digest", "size")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    digest: str
    size: int
    def __init__(self, topology_id: _Optional[str] = ..., digest: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class PushCodeRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: PushCodeHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[PushCodeHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class PushCodeResponse(_message.Message):
    __slots__ = ("replica", "already_held")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    ALREADY_HELD_FIELD_NUMBER: _ClassVar[int]
    replica: str
    already_held: bool
    def __init__(self, replica: _Optional[str] = ..., already_held: _Optional[bool] = ...) -> None: ...
