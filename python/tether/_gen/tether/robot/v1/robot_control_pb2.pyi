from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OperationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATE_UNSPECIFIED: _ClassVar[OperationState]
    PENDING: _ClassVar[OperationState]
    RUNNING: _ClassVar[OperationState]
    SUCCEEDED: _ClassVar[OperationState]
    FAILED: _ClassVar[OperationState]
    CANCELLED: _ClassVar[OperationState]
    EXPIRED: _ClassVar[OperationState]
    UNKNOWN_AWAITING_OPERATOR: _ClassVar[OperationState]
OPERATION_STATE_UNSPECIFIED: OperationState
PENDING: OperationState
RUNNING: OperationState
SUCCEEDED: OperationState
FAILED: OperationState
CANCELLED: OperationState
EXPIRED: OperationState
UNKNOWN_AWAITING_OPERATOR: OperationState

class ExecuteRequest(_message.Message):
    __slots__ = ("operation_id", "device", "joint_move", "sim_reach", "not_after_ms", "session_id")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    JOINT_MOVE_FIELD_NUMBER: _ClassVar[int]
    SIM_REACH_FIELD_NUMBER: _ClassVar[int]
    NOT_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    device: str
    joint_move: JointMove
    sim_reach: SimReach
    not_after_ms: int
    session_id: str
    def __init__(self, operation_id: _Optional[str] = ..., device: _Optional[str] = ..., joint_move: _Optional[_Union[JointMove, _Mapping]] = ..., sim_reach: _Optional[_Union[SimReach, _Mapping]] = ..., not_after_ms: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class JointMove(_message.Message):
    __slots__ = ("kind", "targets_rad")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[JointMove.Kind]
        ABSOLUTE: _ClassVar[JointMove.Kind]
        RELATIVE: _ClassVar[JointMove.Kind]
    KIND_UNSPECIFIED: JointMove.Kind
    ABSOLUTE: JointMove.Kind
    RELATIVE: JointMove.Kind
    class TargetsRadEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    TARGETS_RAD_FIELD_NUMBER: _ClassVar[int]
    kind: JointMove.Kind
    targets_rad: _containers.ScalarMap[str, float]
    def __init__(self, kind: _Optional[_Union[JointMove.Kind, str]] = ..., targets_rad: _Optional[_Mapping[str, float]] = ...) -> None: ...

class SimReach(_message.Message):
    __slots__ = ("seed", "target_x", "target_y", "episodes", "steps")
    SEED_FIELD_NUMBER: _ClassVar[int]
    TARGET_X_FIELD_NUMBER: _ClassVar[int]
    TARGET_Y_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    seed: int
    target_x: float
    target_y: float
    episodes: int
    steps: int
    def __init__(self, seed: _Optional[int] = ..., target_x: _Optional[float] = ..., target_y: _Optional[float] = ..., episodes: _Optional[int] = ..., steps: _Optional[int] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("id", "device", "state", "revision", "attempt", "request_digest", "result", "error", "progress", "evidence", "created_ms", "updated_ms", "not_after_ms", "non_repeatable")
    ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    NOT_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    NON_REPEATABLE_FIELD_NUMBER: _ClassVar[int]
    id: str
    device: str
    state: OperationState
    revision: int
    attempt: int
    request_digest: str
    result: Result
    error: Error
    progress: Progress
    evidence: Evidence
    created_ms: int
    updated_ms: int
    not_after_ms: int
    non_repeatable: bool
    def __init__(self, id: _Optional[str] = ..., device: _Optional[str] = ..., state: _Optional[_Union[OperationState, str]] = ..., revision: _Optional[int] = ..., attempt: _Optional[int] = ..., request_digest: _Optional[str] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., evidence: _Optional[_Union[Evidence, _Mapping]] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., not_after_ms: _Optional[int] = ..., non_repeatable: _Optional[bool] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("document", "digest", "media_type")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    document: bytes
    digest: str
    media_type: str
    def __init__(self, document: _Optional[bytes] = ..., digest: _Optional[str] = ..., media_type: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("fraction", "phase")
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    fraction: float
    phase: str
    def __init__(self, fraction: _Optional[float] = ..., phase: _Optional[str] = ...) -> None: ...

class JointReading(_message.Message):
    __slots__ = ("joint", "position_rad", "velocity_rad_s", "torque_on", "hardware_errors")
    JOINT_FIELD_NUMBER: _ClassVar[int]
    POSITION_RAD_FIELD_NUMBER: _ClassVar[int]
    VELOCITY_RAD_S_FIELD_NUMBER: _ClassVar[int]
    TORQUE_ON_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    joint: str
    position_rad: float
    velocity_rad_s: float
    torque_on: bool
    hardware_errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, joint: _Optional[str] = ..., position_rad: _Optional[float] = ..., velocity_rad_s: _Optional[float] = ..., torque_on: _Optional[bool] = ..., hardware_errors: _Optional[_Iterable[str]] = ...) -> None: ...

class Evidence(_message.Message):
    __slots__ = ("revision", "reason", "read_at_ms", "read_back", "document", "digest")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    READ_AT_MS_FIELD_NUMBER: _ClassVar[int]
    READ_BACK_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    revision: int
    reason: str
    read_at_ms: int
    read_back: _containers.RepeatedCompositeFieldContainer[JointReading]
    document: bytes
    digest: str
    def __init__(self, revision: _Optional[int] = ..., reason: _Optional[str] = ..., read_at_ms: _Optional[int] = ..., read_back: _Optional[_Iterable[_Union[JointReading, _Mapping]]] = ..., document: _Optional[bytes] = ..., digest: _Optional[str] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("states", "device", "page_size", "page_token")
    STATES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[OperationState]
    device: str
    page_size: int
    page_token: str
    def __init__(self, states: _Optional[_Iterable[_Union[OperationState, str]]] = ..., device: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchOperationRequest(_message.Message):
    __slots__ = ("operation_id", "from_revision")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_REVISION_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    from_revision: int
    def __init__(self, operation_id: _Optional[str] = ..., from_revision: _Optional[int] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("outcome", "operation")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[CancelResponse.Outcome]
        CANCELLED_BEFORE_START: _ClassVar[CancelResponse.Outcome]
        STOPPED_WHILE_RUNNING: _ClassVar[CancelResponse.Outcome]
        ALREADY_TERMINAL: _ClassVar[CancelResponse.Outcome]
        NOT_RUNNING: _ClassVar[CancelResponse.Outcome]
    OUTCOME_UNSPECIFIED: CancelResponse.Outcome
    CANCELLED_BEFORE_START: CancelResponse.Outcome
    STOPPED_WHILE_RUNNING: CancelResponse.Outcome
    ALREADY_TERMINAL: CancelResponse.Outcome
    NOT_RUNNING: CancelResponse.Outcome
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    outcome: CancelResponse.Outcome
    operation: Operation
    def __init__(self, outcome: _Optional[_Union[CancelResponse.Outcome, str]] = ..., operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ("operation_id", "decision", "evidence_revision", "note")
    class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DECISION_UNSPECIFIED: _ClassVar[ResolveRequest.Decision]
        DONE: _ClassVar[ResolveRequest.Decision]
        REISSUE: _ClassVar[ResolveRequest.Decision]
        ABANDON: _ClassVar[ResolveRequest.Decision]
    DECISION_UNSPECIFIED: ResolveRequest.Decision
    DONE: ResolveRequest.Decision
    REISSUE: ResolveRequest.Decision
    ABANDON: ResolveRequest.Decision
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_REVISION_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    decision: ResolveRequest.Decision
    evidence_revision: int
    note: str
    def __init__(self, operation_id: _Optional[str] = ..., decision: _Optional[_Union[ResolveRequest.Decision, str]] = ..., evidence_revision: _Optional[int] = ..., note: _Optional[str] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("device",)
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    device: str
    def __init__(self, device: _Optional[str] = ...) -> None: ...

class JointStop(_message.Message):
    __slots__ = ("joint", "state", "position_rad", "hardware_errors")
    JOINT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    POSITION_RAD_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    joint: str
    state: str
    position_rad: float
    hardware_errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, joint: _Optional[str] = ..., state: _Optional[str] = ..., position_rad: _Optional[float] = ..., hardware_errors: _Optional[_Iterable[str]] = ...) -> None: ...

class DeviceStop(_message.Message):
    __slots__ = ("device", "ok", "joints", "error", "latched")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LATCHED_FIELD_NUMBER: _ClassVar[int]
    device: str
    ok: bool
    joints: _containers.RepeatedCompositeFieldContainer[JointStop]
    error: Error
    latched: bool
    def __init__(self, device: _Optional[str] = ..., ok: _Optional[bool] = ..., joints: _Optional[_Iterable[_Union[JointStop, _Mapping]]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., latched: _Optional[bool] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[DeviceStop]
    def __init__(self, devices: _Optional[_Iterable[_Union[DeviceStop, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("session_id", "ttl_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ttl_ms: int
    def __init__(self, session_id: _Optional[str] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("expires_ms",)
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    expires_ms: int
    def __init__(self, expires_ms: _Optional[int] = ...) -> None: ...
