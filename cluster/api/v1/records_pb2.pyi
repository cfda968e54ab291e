from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NimbusRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[NimbusRole]
    FOLLOWER: _ClassVar[NimbusRole]
    LEADER: _ClassVar[NimbusRole]

class TopologyStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[TopologyStatus]
    ACTIVE: _ClassVar[TopologyStatus]
    INACTIVE: _ClassVar[TopologyStatus]
    KILLED: _ClassVar[TopologyStatus]
    REBALANCING: _ClassVar[TopologyStatus]
    CODE_MISSING: _ClassVar[TopologyStatus]
ROLE_UNSPECIFIED: NimbusRole
FOLLOWER: NimbusRole
LEADER: NimbusRole
STATUS_UNSPECIFIED: TopologyStatus
ACTIVE: TopologyStatus
INACTIVE: TopologyStatus
KILLED: TopologyStatus
REBALANCING: TopologyStatus
CODE_MISSING: TopologyStatus

class LeaderEpoch(_message.Message):
    __slots__ = ("epoch", "holder", "lock_node", "since_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LOCK_NODE_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    holder: str
    lock_node: str
    since_ms: int
    def __init__(self, epoch: _Optional[int] = ..., holder: _Optional[str] = ..., lock_node: _Optional[str] = ..., since_ms: _Optional[int] = ...) -> None: ...

class EpochRecord(_message.Message):
    __slots__ = ("epoch", "holder", "lock_node", "started_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LOCK_NODE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    holder: str
    lock_node: str
    started_ms: int
    def __init__(self, epoch: _Optional[int] = ..., holder: _Optional[str] = ..., lock_node: _Optional[str] = ..., started_ms: _Optional[int] = ...) -> None: ...

class NimbusSummary(_message.Message):
    __slots__ = ("address", "role", "epoch", "version", "start_time_ms", "code_sync_lag", "is_leader")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CODE_SYNC_LAG_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    address: str
    role: NimbusRole
    epoch: int
    version: str
    start_time_ms: int
    code_sync_lag: int
    is_leader: bool
    def __init__(self, address: _Optional[str] = ..., role: _Optional[_Union[NimbusRole, str]] = ..., epoch: _Optional[int] = ..., version: _Optional[str] = ..., start_time_ms: _Optional[int] = ..., code_sync_lag: _Optional[int] = ..., is_leader: _Optional[bool] = ...) -> None: ...

class StormBase(_message.Message):
    __slots__ = ("name", "status", "owner", "epoch", "digest", "launch_time_ms", "num_workers", "component_parallelism", "config_json", "package_size", "client_request_id", "kill_wait_s", "kill_time_ms", "status_before_rebalance", "rebalance_until_ms", "components_json", "status_before_code_missing")
    class ComponentParallelismEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KILL_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    KILL_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    STATUS_BEFORE_REBALANCE_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_BEFORE_CODE_MISSING_FIELD_NUMBER: _ClassVar[int]
    name: str
    status: TopologyStatus
    owner: str
    epoch: int
    digest: str
    launch_time_ms: int
    num_workers: int
    component_parallelism: _containers.ScalarMap[str, int]
    config_json: str
    package_size: int
    client_request_id: str
    kill_wait_s: int
    kill_time_ms: int
    status_before_rebalance: TopologyStatus
    rebalance_until_ms: int
    components_json: str
    status_before_code_missing: TopologyStatus
    def __init__(self, name: _Optional[str] = ..., status: _Optional[_Union[TopologyStatus, str]] = ..., owner: _Optional[str] = ..., epoch: _Optional[int] = ..., digest: _Optional[str] = ..., launch_time_ms: _Optional[int] = ..., num_workers: _Optional[int] = ..., component_parallelism: _Optional[_Mapping[str, int]] = ..., config_json: _Optional[str] = ..., package_size: _Optional[int] = ..., client_request_id: _Optional[str] = ..., kill_wait_s: _Optional[int] = ..., kill_time_ms: _Optional[int] = ..., status_before_rebalance: _Optional[_Union[TopologyStatus, str]] = ..., rebalance_until_ms: _Optional[int] = ..., components_json: _Optional[str] = ..., status_before_code_missing: _Optional[_Union[TopologyStatus, str]] = ...) -> None: ...

class SlotAssignment(_message.Message):
    __slots__ = ("slot", "supervisor_id", "host", "port")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SUPERVISOR_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    slot: int
    supervisor_id: str
    host: str
    port: int
    def __init__(self, slot: _Optional[int] = ..., supervisor_id: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("topology_id", "epoch", "slots", "digest", "assigned_ms")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_MS_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    epoch: int
    slots: _containers.RepeatedCompositeFieldContainer[SlotAssignment]
    digest: str
    assigned_ms: int
    def __init__(self, topology_id: _Optional[str] = ..., epoch: _Optional[int] = ..., slots: _Optional[_Iterable[_Union[SlotAssignment, _Mapping]]] = ..., digest: _Optional[str] = ..., assigned_ms: _Optional[int] = ...) -> None: ...

class SupervisorInfo(_message.Message):
    __slots__ = ("supervisor_id", "host", "slots_total", "slots_used", "start_time_ms", "version", "heartbeat_ms")
    SUPERVISOR_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_USED_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    supervisor_id: str
    host: str
    slots_total: int
    slots_used: int
    start_time_ms: int
    version: str
    heartbeat_ms: int
    def __init__(self, supervisor_id: _Optional[str] = ..., host: _Optional[str] = ..., slots_total: _Optional[int] = ..., slots_used: _Optional[int] = ..., start_time_ms: _Optional[int] = ..., version: _Optional[str] = ..., heartbeat_ms: _Optional[int] = ...) -> None: ...

class WorkerHeartbeat(_message.Message):
    __slots__ = ("topology_id", "supervisor_id", "slot", "time_ms", "batches_committed", "rows_processed", "last_batch_id", "status", "last_error", "failures_in_a_row", "restarts", "log_path", "components", "rows_per_s", "partitioning_note")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    SUPERVISOR_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    ROWS_PROCESSED_FIELD_NUMBER: _ClassVar[int]
    LAST_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURES_IN_A_ROW_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    ROWS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PARTITIONING_NOTE_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    supervisor_id: str
    slot: int
    time_ms: int
    batches_committed: int
    rows_processed: int
    last_batch_id: int
    status: str
    last_error: str
    failures_in_a_row: int
    restarts: int
    log_path: str
    components: _containers.RepeatedCompositeFieldContainer[ComponentMetrics]
    rows_per_s: float
    partitioning_note: str
    def __init__(self, topology_id: _Optional[str] = ..., supervisor_id: _Optional[str] = ..., slot: _Optional[int] = ..., time_ms: _Optional[int] = ..., batches_committed: _Optional[int] = ..., rows_processed: _Optional[int] = ..., last_batch_id: _Optional[int] = ..., status: _Optional[str] = ..., last_error: _Optional[str] = ..., failures_in_a_row: _Optional[int] = ..., restarts: _Optional[int] = ..., log_path: _Optional[str] = ..., components: _Optional[_Iterable[_Union[ComponentMetrics, _Mapping]]] = ..., rows_per_s: _Optional[float] = ..., partitioning_note: _Optional[str] = ...) -> None: ...

class ComponentMetrics(_message.Message):
    __slots__ = ("component", "rows", "skipped_rows", "rows_per_s", "partitions", "late_rows")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_ROWS_FIELD_NUMBER: _ClassVar[int]
    ROWS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LATE_ROWS_FIELD_NUMBER: _ClassVar[int]
    component: str
    rows: int
    skipped_rows: int
    rows_per_s: float
    partitions: int
    late_rows: int
    def __init__(self, component: _Optional[str] = ..., rows: _Optional[int] = ..., skipped_rows: _Optional[int] = ..., rows_per_s: _Optional[float] = ..., partitions: _Optional[int] = ..., late_rows: _Optional[int] = ...) -> None: ...

class ErrorInfo(_message.Message):
    __slots__ = ("component", "message", "time_ms", "host", "epoch")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    component: str
    message: str
    time_ms: int
    host: str
    epoch: int
    def __init__(self, component: _Optional[str] = ..., message: _Optional[str] = ..., time_ms: _Optional[int] = ..., host: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class RequestOutcome(_message.Message):
    __slots__ = ("request_id", "method", "grpc_code", "message", "topology_id", "epoch", "time_ms", "handover_to")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    GRPC_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    HANDOVER_TO_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    method: str
    grpc_code: int
    message: str
    topology_id: str
    epoch: int
    time_ms: int
    handover_to: str
    def __init__(self, request_id: _Optional[str] = ..., method: _Optional[str] = ..., grpc_code: _Optional[int] = ..., message: _Optional[str] = ..., topology_id: _Optional[str] = ..., epoch: _Optional[int] = ..., time_ms: _Optional[int] = ..., handover_to: _Optional[str] = ...) -> None: ...

class Handover(_message.Message):
    __slots__ = ("to", "epoch", "request_id", "time_ms")
    TO_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    to: str
    epoch: int
    request_id: str
    time_ms: int
    def __init__(self, to: _Optional[str] = ..., epoch: _Optional[int] = ..., request_id: _Optional[str] = ..., time_ms: _Optional[int] = ...) -> None: ...

class WorkerClaim(_message.Message):
    __slots__ = ("topology_id", "index", "supervisor_id", "slot", "host", "pid", "assignment_version", "claimed_ms")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SUPERVISOR_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_MS_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    index: int
    supervisor_id: str
    slot: int
    host: str
    pid: int
    assignment_version: int
    claimed_ms: int
    def __init__(self, topology_id: _Optional[str] = ..., index: _Optional[int] = ..., supervisor_id: _Optional[str] = ..., slot: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., assignment_version: _Optional[int] = ..., claimed_ms: _Optional[int] = ...) -> None: ...

class BatchCommit(_message.Message):
    __slots__ = ("topology_id", "sink", "batch_id", "claim_epoch", "supervisor_id", "slot", "pid", "time_ms", "lineage")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    SINK_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUPERVISOR_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LINEAGE_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    sink: str
    batch_id: int
    claim_epoch: int
    supervisor_id: str
    slot: int
    pid: int
    time_ms: int
    lineage: str
    def __init__(self, topology_id: _Optional[str] = ..., sink: _Optional[str] = ..., batch_id: _Optional[int] = ..., claim_epoch: _Optional[int] = ..., supervisor_id: _Optional[str] = ..., slot: _Optional[int] = ..., pid: _Optional[int] = ..., time_ms: _Optional[int] = ..., lineage: _Optional[str] = ...) -> None: ...
