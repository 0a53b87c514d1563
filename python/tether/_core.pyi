"""Type stubs for `tether._core`, the Rust extension (hand-written; checked by mypy.stubtest)."""

from collections.abc import Mapping, Sequence
from typing import Any, final

__version__: str

class TetherError(Exception):
    """Root of every error Tether raises."""

# --- patch (rust/src/bindings/patch.rs) ---

import typing as _typing  # noqa: E402

class PatchError(TetherError):
    """A JSON Patch was refused; `op_index` and `path` locate the failing operation.

    `warnings` holds the operations AG-UI mode dropped before the failure, in order.
    """

    op_index: int | None
    path: str | None
    code: str | None
    warnings: tuple[PatchWarning, ...]

@final
class PatchWarning:
    """An operation the AG-UI mode tolerated (dropped), with a stable snake_case `code`."""

    @property
    def op_index(self) -> int: ...
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...
    def __new__(cls, op_index: int, code: str, message: str) -> PatchWarning: ...

class InvalidPatch(PatchError):
    """The patch is malformed (structure, member types, pointer syntax, unknown op, non-JSON)."""

class PatchDoesNotApply(PatchError):
    """A well-formed patch does not apply: a missing path, an index out of range, a failed test,
    a move into the value's own child."""

class InvalidDocument(PatchError):
    """The document is not JSON: a dict/list subclass, a non-str key, a non-JSON value."""

PATCH_WARNING_CODES: list[str]
PATCH_ERROR_CODES: list[str]

def patch_apply(
    doc: _typing.Any, patch: _typing.Any, *, mode: str = "strict", in_place: bool = False
) -> tuple[_typing.Any, list[PatchWarning]]:
    """Apply a patch to Python objects; returns (document, warnings)."""

def patch_apply_json(
    doc: bytes | bytearray | str, patch: bytes | bytearray | str, *, mode: str = "strict"
) -> tuple[bytes, list[PatchWarning]]:
    """Apply a JSON-text patch to a JSON-text document; returns (json_bytes, warnings)."""

def patch_diff(old: _typing.Any, new: _typing.Any) -> list[dict[str, _typing.Any]]:
    """A patch (list of operation dicts) turning `old` into `new`."""

# --- agui (rust/src/bindings/agui.rs) ---

import datetime as _datetime  # noqa: E402

from typing_extensions import disjoint_base as _disjoint_base  # noqa: E402

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

@_disjoint_base
class ActivityStore:
    """One AG-UI thread's ordered message history, built from events (dicts or bytes).

    Single owner: not for concurrent use from several threads. Not final:
    `tether.agui.ActivityStore` subclasses it to pass today's date.
    """

    def __new__(
        cls,
        *,
        today: _datetime.date | None = None,
        lifecycle: _typing.Literal["strict", "partial"] = "strict",
    ) -> _typing.Self:
        """`today` judges deprecation windows (no clock is read; without it they are closed);
        `lifecycle="partial"` lets a capture begin mid-run."""
    @property
    def today(self) -> _datetime.date | None:
        """The date deprecation windows are judged by, or None."""
    @property
    def lifecycle(self) -> _typing.Literal["strict", "partial"]:
        """How the run lifecycle is enforced."""
    def feed(self, data: bytes | bytearray) -> list[AguiWarning]:
        """Feeds raw bytes (one JSON event, NDJSON or SSE; any chunk split).

        Returns the warnings the completed events caused. Raises an `AguiError` subclass at
        the first fatal event; events before it stay applied, bytes after it stay buffered.
        """
    def handle_event(self, event: dict[str, Any]) -> list[AguiWarning]:
        """Handles one event given as a dict and returns the warnings it caused.

        A NaN or infinite float is `AguiMalformedError` (`non_finite_number`); another
        non-JSON Python value is a `TypeError`.
        """
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

AGUI_RAW_EVENT_NULL_EXPIRES: _datetime.date

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

class Compacted(CatalogRejection):
    """The activity settled and was compacted."""

class NotCompactable(CatalogRejection):
    """The activity is unsettled or settled after the cutoff."""

class InvalidRefusal(CatalogRejection):
    """A refused admission's refusal is not a failed refusal document."""

class WrongHost(CatalogRejection):
    """The activity's device is bound to another host."""

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

def catalog_admission_template(admission: Any) -> tuple[Any, ...]:
    """The record `admit` makes of `admission` where none exists, its `catalog_admission_stamps`
    columns left for the admitting transaction's reading (zero, empty)."""

def catalog_admission_stamps() -> list[tuple[str, str]]:
    """The columns of a new record that hold the admitting transaction's clock reading, each
    with the part it holds: "boot_id", "boot_ms" or "wall_ms"."""

def catalog_changed_mask(old: tuple[Any, ...], new: tuple[Any, ...]) -> int:
    """The positions where two rows of the layout differ, as a bit mask (bit i: column i), for
    storage to write only the changed columns. Cells are compared as Python values, the same
    object first (a transition's unchanged cells are its input's objects)."""

def catalog_update_rows(
    updates: list[tuple[tuple[Any, ...], tuple[Any, ...]]], fixed: int
) -> tuple[list[int], str]:
    """The batch UPDATE of ``updates`` ((read row, decided row) pairs) as storage writes it in
    one statement: the positions written (every position where some pair differs, as
    `catalog_changed_mask` compares them, except those of ``fixed``, a bit mask), and one
    JSON array with a row per pair: the read row's key (positions 0 to 2), its version (the
    guard), the decided row's version, then its cells at those positions. Cells are text
    (valid Unicode), signed 64-bit integers or None; any other is `CatalogStorageError`."""

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
def catalog_admit_refused(
    row: tuple[Any, ...] | None, admission: Any, refusal: Any, now: Any
) -> tuple[Any, ...]:
    """`admit_refused`: the admission its family refused, holding `refusal` as its failed result."""

def catalog_check_claim(owner: str, lease_ms: int, now: Any, host: str | None = None) -> None:
    """Refuses bad claim arguments even when nothing is claimable. `host` is the claiming
    worker's host (None: a claim that names none, which never takes device-bound work)."""

def catalog_claim(
    row: tuple[Any, ...], owner: str, lease_ms: int, now: Any, host: str | None = None
) -> tuple[Any, ...]: ...
def catalog_claim_and_bind(
    row: tuple[Any, ...], owner: str, lease_ms: int, now: Any, host: str | None = None
) -> tuple[Any, ...]:
    """`claim`, then the bind of the activity's own operation identity to the attempt it issued
    (a reconcile-only attempt comes back claimed and unbound), on one reading."""

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
def catalog_refresh_evidence(
    row: tuple[Any, ...], seen_revision: int, evidence: Any, now: Any
) -> tuple[Any, ...]:
    """A new evidence revision while a decision is awaited, on the revision compared against."""

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

def catalog_compact(row: tuple[Any, ...], cutoff_ms: int, now: Any) -> tuple[Any, ...]:
    """The compacted form of a settled row whose settlement is at or before the wall-clock
    `cutoff_ms` (`NotCompactable` otherwise; a compacted row comes back unchanged)."""

def catalog_compactable(row: tuple[Any, ...], cutoff_ms: int) -> bool:
    """Whether the core would compact this row at the wall-clock `cutoff_ms`."""

def catalog_lease_reached(lease_boot_id: str, at_ms: int, now: Any) -> bool:
    """Whether the lease-clock time `at_ms`, measured on boot `lease_boot_id`, is reached at
    `now`."""

# --- codec (rust/src/bindings/codec.rs) ---

# Codec failures raise `tether._codec_errors.DxlUsageError` / `DxlFrameError` (born in Python).

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

# --- live (rust/src/bindings/live.rs) ---

class LiveEventError(TetherError):
    """A live event, frame or record was refused; `code`, `path` and `reason` say why and where.

    `code` is a stable snake_case code (`live_error_codes()`), `path` an RFC 6901 pointer.
    """

    code: str | None
    path: str | None
    reason: str | None

class LiveEventInvalid(LiveEventError):
    """The peer sent an event, frame or canonical record that the live contract refuses."""

class LiveUsageError(LiveEventError):
    """The caller used a live object wrongly (bad configuration, another session's record)."""

@final
class LiveEvent:
    """One validated live event (frozen)."""

    @property
    def event_type(self) -> str: ...
    @property
    def workspace_id(self) -> str: ...
    @property
    def agent_session_id(self) -> str: ...
    @property
    def message_id(self) -> str | None:
        """The message id of a message delta, else None."""
    @property
    def turn_id(self) -> str | None:
        """The turn a message delta or turn update concerns, else None."""
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self) -> bytes: ...

def validate_live_event(data: bytes | bytearray | str | dict[str, Any] | LiveEvent) -> LiveEvent:
    """Validates one live event; raises `LiveEventInvalid` naming the rule and the JSON path."""

@final
class LiveDelivery:
    """One delivery of a frame: an event, or a discontinuity naming keys to re-read."""

    @property
    def kind(self) -> str:
        """ "event" or "discontinuity"."""
    @property
    def event(self) -> LiveEvent | None: ...
    @property
    def reconcile_keys(self) -> list[tuple[str, str]]:
        """A discontinuity's keys as (kind, id); empty for an event."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class LivePublisher:
    """One session's publisher: tool-output traces and events framed into transport frames.

    Single owner: not for concurrent use from several threads.
    """

    def __new__(
        cls,
        workspace_id: str,
        agent_session_id: str,
        *,
        epoch: int,
        max_chunk_bytes: int = 131072,
        max_output_bytes: int = 1048576,
        truncation_marker: str | None = None,
        max_deliveries_per_frame: int = 64,
    ) -> LivePublisher: ...
    def tool_output(self, message_id: str, turn_id: str, text: str, *, now_ms: int) -> None:
        """Appends text to a tool call's trace (role "tool", kind "tool_call")."""
    def publish(self, event: bytes | bytearray | str | dict[str, Any] | LiveEvent) -> None:
        """Queues an event, validated first; one for a settled turn becomes a discontinuity."""
    def poll_frame(self) -> bytes | None:
        """The next frame's JSON bytes, or None when nothing is queued."""
    def heartbeat(self) -> bytes:
        """The next frame, or an empty one that still advances `seq`."""
    def emitted_bytes(self, message_id: str) -> int | None: ...
    def dropped_bytes(self, message_id: str) -> int | None: ...
    def capped_output(self, text: str) -> str:
        """The text a subscriber holds once the whole trace `text` went through `tool_output`
        (in any pieces): the output cap and its marker applied."""
    def is_turn_settled(self, turn_id: str) -> bool: ...
    def forget_message(self, message_id: str) -> None:
        """Forget a message that will be published no more (a bounded feed let it go): nothing
        is framed; should it come back, it is published as a new one."""
    def forget_turn(self, turn_id: str) -> None:
        """Forget a turn's settled mark once none of its messages is held."""
    @property
    def held(self) -> int:
        """Messages and turns this publisher holds state for (what the forgets give back)."""
    @property
    def epoch(self) -> int: ...
    @property
    def seq(self) -> int:
        """The seq of the last frame produced (0 before the first)."""
    @property
    def pending(self) -> int: ...

@final
class FrameOutcome:
    """What one frame meant to the subscriber (frozen)."""

    @property
    def epoch(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def fault(self) -> str | None:
        """None, or one of `live_fault_kinds()`."""
    @property
    def missing(self) -> list[int]:
        """The seqs this frame revealed as missing: the latest `window` of them at most."""
    @property
    def deliveries(self) -> list[LiveDelivery]:
        """Deliveries to apply now (empty when the frame was dropped)."""
    @property
    def reread(self) -> bool:
        """Whether the canonical state must be re-read."""

@final
class LiveSubscriber:
    """Reads transport frames and says when the canonical state must be re-read.

    Single owner: not for concurrent use from several threads.
    """

    def __new__(
        cls, *, epoch: int | None = None, seq: int = 0, window: int = 1024
    ) -> LiveSubscriber: ...
    def handle_frame(self, data: bytes) -> FrameOutcome:
        """Reads one frame; raises `LiveEventInvalid` for a frame the contract refuses."""
    def resync(self, epoch: int, seq: int) -> list[LiveDelivery]:
        """The overlay holds the canonical record as of (epoch, seq): returns the kept
        deliveries of later frames, to apply on top."""
    @property
    def epoch(self) -> int | None: ...
    @property
    def last_seq(self) -> int: ...
    @property
    def needs_reread(self) -> bool: ...
    @property
    def missing(self) -> list[int]: ...

@final
class LiveOverlay:
    """One session's optimistic overlay, reconciled with the canonical record.

    Single owner: not for concurrent use from several threads.
    """

    def __new__(cls, workspace_id: str, agent_session_id: str) -> LiveOverlay: ...
    def apply(self, event: bytes | bytearray | str | dict[str, Any] | LiveEvent) -> str:
        """Applies one event: "applied", "unchanged" or the reason it needs reconciliation."""
    def apply_delivery(self, delivery: LiveDelivery) -> list[str]: ...
    def apply_outcome(self, outcome: FrameOutcome) -> list[str]:
        """Applies every delivery of a frame outcome, in order."""
    def reconcile(
        self, record: dict[str, Any], *, replay: Sequence[LiveDelivery] = ...
    ) -> list[tuple[str, str]]:
        """Replaces the optimistic state with the canonical record, then applies `replay` (what
        `LiveSubscriber.resync` returned); returns the (kind, id) of each terminal optimistic
        entry that stood."""
    def snapshot(self) -> dict[str, Any]:
        """The overlay in the canonical record's form."""
    def message(self, message_id: str) -> dict[str, Any] | None: ...
    @property
    def marks(self) -> list[tuple[str, str, str]]:
        """Every entry that needs reconciliation: (kind, id, reason)."""
    @property
    def needs_reconciliation(self) -> bool: ...
    @property
    def events_applied(self) -> int: ...

def live_error_codes() -> list[str]:
    """Every code a live error can carry."""

def live_schema_codes() -> list[str]:
    """The codes of rules the live-event JSON Schema expresses."""

def live_tether_only_codes() -> list[str]:
    """The codes of contract rules only Tether enforces."""

def live_mark_reasons() -> list[str]:
    """Every reason the overlay gives for an entry that needs reconciliation."""

def live_fault_kinds() -> list[str]:
    """Every fault the subscriber reports."""

def live_key_kinds() -> list[str]:
    """Every reconcile-key kind."""
