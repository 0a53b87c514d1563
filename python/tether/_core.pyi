"""Type stubs for `tether._core`, the Rust extension (hand-written; checked by mypy.stubtest)."""

from collections.abc import Mapping, Sequence
from typing import Any, final

__version__: str

class TetherError(Exception):
    """Root of every error Tether raises."""

# --- patch (rust/src/bindings/patch.rs) ---

import typing as _typing  # noqa: E402

class PatchError(TetherError):
    """A JSON Patch was refused; `op_index` and `path` locate the failing operation."""

    op_index: int | None
    path: str | None
    code: str | None

class InvalidPatch(PatchError):
    """The patch is malformed (structure, member types, pointer syntax, unknown op, non-JSON)."""

class PatchDoesNotApply(PatchError):
    """A well-formed patch does not apply: a missing path, an index out of range, a failed test."""

class InvalidDocument(PatchError):
    """The document is not JSON: a dict/list subclass, a non-str key, a non-JSON value."""

PATCH_WARNING_CODES: list[str]
PATCH_ERROR_CODES: list[str]

def patch_apply(
    doc: _typing.Any, patch: _typing.Any, *, mode: str = "strict", in_place: bool = False
) -> tuple[_typing.Any, list[tuple[int, str, str]]]:
    """Apply a patch to Python objects; returns (document, warnings)."""

def patch_apply_json(
    doc: bytes, patch: bytes, *, mode: str = "strict"
) -> tuple[bytes, list[tuple[int, str, str]]]:
    """Apply a JSON-text patch to a JSON-text document; returns (json_bytes, warnings)."""

def patch_diff(old: _typing.Any, new: _typing.Any) -> list[dict[str, _typing.Any]]:
    """A patch (list of operation dicts) turning `old` into `new`."""

# --- agui (rust/src/bindings/agui.rs) ---

class AguiError(TetherError):
    """An AG-UI event could not be consumed; the store is unchanged by it.

    Instances carry `code` (stable snake_case), `event_type`, `message_id` and `reason`.
    """

    code: str | None
    event_type: str | None
    message_id: str | None
    reason: str | None

class AguiDecodeError(AguiError):
    """The bytes are not a JSON/NDJSON/SSE AG-UI event stream."""

class AguiMalformedError(AguiError):
    """A field the AG-UI protocol describes carries a value the schema rejects."""

class AguiAttributionError(AguiMalformedError):
    """An ACTIVITY_DELTA's subagentRunId disagrees with the activity's owner."""

class AguiSequenceError(AguiError):
    """The event is not allowed at this point of the run."""

@final
class AguiWarning:
    """A tolerated failure: the event, or part of it, was skipped or stripped."""

    @property
    def code(self) -> str: ...
    @property
    def event_type(self) -> str | None: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def reason(self) -> str: ...
    def __new__(
        cls, code: str, reason: str, *, event_type: str | None = None, message_id: str | None = None
    ) -> AguiWarning: ...
    def to_dict(self) -> dict[str, str]:
        """The wire-style dict: `code`, `eventType`, `messageId`, `reason`."""

@final
class ActivityStore:
    """One AG-UI thread's ordered message history, built from events (dicts or bytes).

    Single owner: not for concurrent use from several threads.
    """

    def __new__(cls) -> ActivityStore: ...
    def feed(self, data: bytes | bytearray) -> list[AguiWarning]:
        """Feeds raw bytes (one JSON event, NDJSON or SSE; any chunk split).

        Returns the warnings the completed events caused. Raises an `AguiError` subclass at
        the first fatal event; events before it stay applied, bytes after it stay buffered.
        """
    def handle_event(self, event: dict[str, Any]) -> list[AguiWarning]:
        """Handles one event given as a dict and returns the warnings it caused."""
    def finish(self) -> list[AguiWarning]:
        """End of the byte stream: handles a last unterminated event; leftovers are an error."""
    def messages(self) -> list[dict[str, Any]]:
        """The history as wire-form (camelCase) dicts."""
    def run_input_messages(self) -> list[dict[str, Any]]:
        """The history without activity messages."""
    def activities(self) -> list[dict[str, Any]]:
        """The activity messages only, in history order."""
    def get(self, message_id: str) -> dict[str, Any] | None:
        """The message with this id, in wire form, or None."""
    def to_json(self) -> bytes:
        """The history as a JSON array."""
    @property
    def warnings(self) -> list[AguiWarning]:
        """Every warning so far, oldest first."""
    @property
    def events_handled(self) -> int:
        """Events handled so far (applied, skipped or dropped with a warning)."""
    @property
    def pending_bytes(self) -> int:
        """Bytes fed that do not yet form a complete event."""
    def __len__(self) -> int: ...

@final
class ParseOnlyStream:
    """Benchmark baseline: frames and parses JSON exactly as `ActivityStore.feed`, nothing more."""

    def __new__(cls) -> ParseOnlyStream: ...
    def feed(self, data: bytes | bytearray) -> int:
        """Feeds bytes and returns how many complete JSON values they finished."""

def agui_warning_codes() -> list[str]:
    """Every warning code `ActivityStore` can produce."""

def agui_error_codes() -> list[str]:
    """Every error code `ActivityStore` can raise."""

# --- catalog (rust/src/bindings/catalog.rs) ---
# Rows are flat tuples in `catalog_columns()` order; inputs are tether.activities dataclasses,
# read by attribute (typed Any: the bindings read attributes, not classes). `now` is a
# `tether.activities.Now` reading (boot_id, boot_ms, wall_ms).

from typing import ClassVar  # noqa: E402

class CatalogRejection(TetherError):
    """The Activity catalog refused a transition; `code` names the rule."""

    code: ClassVar[str]
    field: str | None

class CatalogStorageError(TetherError):
    """A stored catalog row or schema is unusable."""

class CatalogConfigError(TetherError):
    """A catalog URL or option is invalid."""

class StaleFence(CatalogRejection):
    """The fence is not the current attempt's."""

class LeaseExpired(CatalogRejection):
    """The current attempt's lease has expired."""

class AdmissionConflict(CatalogRejection):
    """Same key, different immutable admission."""

class ResultConflict(CatalogRejection):
    """A different result is already recorded."""

class NotBound(CatalogRejection):
    """No provider operation is bound yet."""

class ReconcileOnly(CatalogRejection):
    """The attempt may only reconcile."""

class NotReconciling(CatalogRejection):
    """Only a reconcile attempt may do this."""

class AwaitingDecision(CatalogRejection):
    """The activity awaits an operator decision."""

class NotAwaitingDecision(CatalogRejection):
    """The activity awaits no decision."""

class StaleEvidenceRevision(CatalogRejection):
    """The decision names old evidence."""

class InvalidDecision(CatalogRejection):
    """The operator decision is malformed."""

class ReceiptMismatch(CatalogRejection):
    """The receipt does not fit this activity."""

class TokenlessReceipt(ReceiptMismatch):
    """The receipt has no visibility token."""

class EvidenceMismatch(CatalogRejection):
    """The evidence does not bind the result."""

class SettlementConflict(CatalogRejection):
    """A different settlement is recorded."""

class NoResult(CatalogRejection):
    """No result is recorded yet."""

class OperationConflict(CatalogRejection):
    """A different provider operation is bound."""

class OperationBound(CatalogRejection):
    """The provider operation is bound; reconcile."""

class NotClaimable(CatalogRejection):
    """The activity cannot be claimed now."""

class BoundsExceeded(CatalogRejection):
    """A field is empty, too long or out of range."""

class UnknownActivity(CatalogRejection):
    """No activity with this key exists."""

ABANDONED_MEDIA_TYPE: str
"""Media type of the failed result an operator's "abandon" decision records (no payload)."""
MAX_LEASE_MS: int
"""The longest lease a claim or renewal may take: 7 days."""
MAX_RETRY_AFTER_MS: int
"""The longest reconciliation backoff `record_unknown` may set: 7 days."""

def catalog_columns() -> list[str]:
    """The flat column names, in the order rows cross and storage keeps them."""

def catalog_rejection_codes() -> list[str]:
    """Every rejection code, in declaration order."""

def operation_id_for(kind: str, world_id: str, activity_id: str) -> str: ...
def settlement_evidence_digest(
    kind: str, world_id: str, activity_id: str, result_ref: str, result_digest: str
) -> str: ...
def completion_evidence(key: Any, result: Any, facts: Sequence[tuple[str, str, str]]) -> str:
    """The completion evidence of `result` for `key` and its complete fact set (entity,
    component, canonical JSON value text), as canonical JSON text."""

def verify_completion(
    key: Any,
    result: Any,
    evidence: str | None,
    *,
    written_in_tick: bool,
    state: Mapping[tuple[str, str], str],
) -> tuple[str | None, str | None]:
    """(settlement evidence digest, None) if `evidence` is complete completion evidence of
    `result` for `key` in `state`, else (None, mismatch code)."""

def completion_mismatch_codes() -> list[str]:
    """Every completion mismatch code, in declaration order."""

def catalog_admit(row: tuple[Any, ...] | None, admission: Any, now: Any) -> tuple[Any, ...]: ...
def catalog_check_claim(owner: str, lease_ms: int, now: Any) -> None:
    """Refuses bad claim arguments even when nothing is claimable."""

def catalog_claim(row: tuple[Any, ...], owner: str, lease_ms: int, now: Any) -> tuple[Any, ...]: ...
def catalog_renew(row: tuple[Any, ...], fence: int, lease_ms: int, now: Any) -> tuple[Any, ...]: ...
def catalog_release(row: tuple[Any, ...], fence: int, now: Any) -> tuple[Any, ...]: ...
def catalog_bind_provider_operation(
    row: tuple[Any, ...], fence: int, operation_id: str, now: Any
) -> tuple[Any, ...]: ...
def catalog_record_result(
    row: tuple[Any, ...], fence: int, result: Any, now: Any
) -> tuple[Any, ...]: ...
def catalog_confirm_absent(
    row: tuple[Any, ...], fence: int, guard: Any, now: Any
) -> tuple[Any, ...]: ...
def catalog_record_unknown(
    row: tuple[Any, ...], fence: int, evidence: Any, retry_after_ms: int, now: Any
) -> tuple[Any, ...]: ...
def catalog_resolve(
    row: tuple[Any, ...],
    outcome: str,
    evidence_revision: int,
    operator: str,
    note: str,
    result: Any | None,
    guard: Any | None,
    now: Any,
) -> tuple[Any, ...]: ...
def catalog_settle(
    row: tuple[Any, ...], receipt: Any, evidence_digest: str, fence: int | None, now: Any
) -> tuple[Any, ...]: ...
def catalog_check_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Validates and normalises a stored row (used by scans that do not transition)."""

def catalog_rebase(row: tuple[Any, ...], now: Any) -> tuple[Any, ...]:
    """Brings a row's lease-clock values onto `now`'s boot (unchanged when they already are)."""

def catalog_derive_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A stored row with its derived columns recomputed from its facts (the migration that adds
    them); the version is unchanged, since no transition happened."""

def catalog_lease_reached(lease_boot_id: str, at_ms: int, now: Any) -> bool:
    """Whether the lease-clock time `at_ms`, measured on boot `lease_boot_id`, is reached at
    `now`."""

# --- codec (rust/src/bindings/codec.rs) ---

class DxlError(TetherError):
    """Root of DYNAMIXEL codec errors."""

class DxlUsageError(DxlError):
    """A DYNAMIXEL codec argument the caller can fix (bad id, empty read, oversize packet)."""

class DxlFrameError(DxlError):
    """Received bytes that are not a valid DYNAMIXEL frame or command (the peer's fault)."""

class DxlTransportError(DxlError):
    """The serial line failed: no answer in time, or the port cannot be used."""

class DxlTimeoutError(DxlTransportError):
    """No valid status packet arrived before the deadline (after any allowed read retries)."""

class DxlWriteUnconfirmed(DxlTransportError):
    """A write went out but its status never came back: it may or may not have been applied."""

class DxlPortBusy(DxlTransportError):
    """Another process owns this device (exclusive open or identity lock held)."""

class DxlDeviceError(DxlError):
    """A device answered with an error number in its status packet (see `.code`)."""

class DxlIdentityError(DxlError):
    """The device on the port is not the configured one (identity, model, id or status level)."""

class HostConfigError(TetherError):
    """The host configuration file is invalid (see `.code`)."""

class OperatorRejection(TetherError):
    """An operator decision was refused (credential, stale revision, changed device state)."""

def dxl_crc16(data: bytes) -> int:
    """CRC-16 (poly 0x8005) of `data`."""

def dxl_encode(id: int, instruction: int, params: bytes = ...) -> bytes:
    """Frame any instruction byte with raw parameters (stuffing, length and CRC applied)."""

def dxl_encode_status(id: int, error: int, params: bytes = ...) -> bytes:
    """Frame a status packet (what a device answers)."""

def dxl_ping(id: int) -> bytes: ...
def dxl_read(id: int, address: int, length: int) -> bytes: ...
def dxl_write(id: int, address: int, data: bytes) -> bytes: ...
def dxl_reg_write(id: int, address: int, data: bytes) -> bytes: ...
def dxl_action(id: int = ...) -> bytes: ...
def dxl_reboot(id: int) -> bytes: ...
def dxl_sync_read(address: int, length: int, ids: Sequence[int]) -> bytes: ...
def dxl_sync_write(address: int, length: int, entries: Sequence[tuple[int, bytes]]) -> bytes: ...

@final
class DxlPacket:
    """One decoded frame; status fields decode the error byte of a status packet."""

    @property
    def id(self) -> int: ...
    @property
    def instruction(self) -> int: ...
    @property
    def params(self) -> bytes: ...
    @property
    def is_status(self) -> bool: ...
    @property
    def error(self) -> int | None:
        """The raw error byte of a status packet, None for an instruction packet."""
    @property
    def alert(self) -> bool: ...
    @property
    def error_code(self) -> str | None:
        """Stable code of the error number ("none", "result_fail", ...), None for instructions."""
    @property
    def data(self) -> bytes: ...
    def command(self) -> DxlCommand:
        """Interpret an instruction packet as a typed command."""

@final
class DxlCommand:
    """A parsed instruction. Fields that do not apply to `name` are None / empty."""

    @property
    def name(self) -> str: ...
    @property
    def instruction(self) -> int: ...
    @property
    def address(self) -> int | None: ...
    @property
    def length(self) -> int | None: ...
    @property
    def data(self) -> bytes:
        """WRITE/REG_WRITE data, FACTORY_RESET option, or an uninterpreted instruction's params."""
    @property
    def ids(self) -> list[int]: ...
    @property
    def entries(self) -> list[tuple[int, bytes]]: ...

@final
class DxlDecoder:
    """Streaming decoder: `feed` bytes, `next_packet` until None. Single owner."""

    def __new__(cls, *, max_length: int = 4096) -> DxlDecoder: ...
    def feed(self, data: bytes) -> None: ...
    def next_packet(self) -> DxlPacket | None: ...
    def resync(self) -> None:
        """Abandon a partial frame (after a read timeout): skip one byte and scan again."""
    def clear(self) -> None: ...
    @property
    def buffered(self) -> int: ...
    @property
    def discarded(self) -> int: ...

def dxl_decode_frame(frame: bytes) -> DxlPacket:
    """Decode exactly one complete frame."""

def dxl_error_codes() -> list[str]:
    """Stable codes of codec errors (usage and frame)."""

def dxl_status_error_codes() -> list[str]:
    """Stable codes of status error numbers 0..=7."""

def dxl_instructions() -> list[tuple[str, int]]:
    """Instruction names and bytes."""
