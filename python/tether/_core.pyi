"""Type stubs for `tether._core`, the Rust extension (hand-written; checked by mypy.stubtest)."""

__version__: str

class TetherError(Exception):
    """Root of every error Tether raises."""

# --- patch (rust/src/bindings/patch.rs) ---

# --- agui (rust/src/bindings/agui.rs) ---

# --- catalog (rust/src/bindings/catalog.rs) ---
# Rows are flat tuples in `catalog_columns()` order; inputs are tether.activities dataclasses,
# read by attribute (typed Any: the bindings read attributes, not classes).

from typing import Any, ClassVar  # noqa: E402

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

def catalog_columns() -> list[str]:
    """The flat column names, in the order rows cross and storage keeps them."""

def catalog_rejection_codes() -> list[str]:
    """Every rejection code, in declaration order."""

def operation_id_for(kind: str, world_id: str, activity_id: str) -> str: ...
def settlement_evidence_digest(
    kind: str, world_id: str, activity_id: str, result_ref: str, result_digest: str
) -> str: ...
def catalog_admit(row: tuple[Any, ...] | None, admission: Any, now_ms: int) -> tuple[Any, ...]: ...
def catalog_claim(
    row: tuple[Any, ...], owner: str, lease_ms: int, now_ms: int
) -> tuple[Any, ...]: ...
def catalog_renew(
    row: tuple[Any, ...], fence: int, lease_ms: int, now_ms: int
) -> tuple[Any, ...]: ...
def catalog_release(row: tuple[Any, ...], fence: int, now_ms: int) -> tuple[Any, ...]: ...
def catalog_bind_provider_operation(
    row: tuple[Any, ...], fence: int, operation_id: str, now_ms: int
) -> tuple[Any, ...]: ...
def catalog_record_result(
    row: tuple[Any, ...], fence: int, result: Any, now_ms: int
) -> tuple[Any, ...]: ...
def catalog_confirm_absent(
    row: tuple[Any, ...], fence: int, guard: Any, now_ms: int
) -> tuple[Any, ...]: ...
def catalog_record_unknown(
    row: tuple[Any, ...], fence: int, evidence: Any, retry_after_ms: int, now_ms: int
) -> tuple[Any, ...]: ...
def catalog_resolve(
    row: tuple[Any, ...],
    outcome: str,
    evidence_revision: int,
    operator: str,
    note: str,
    result: Any | None,
    guard: Any | None,
    now_ms: int,
) -> tuple[Any, ...]: ...
def catalog_settle(
    row: tuple[Any, ...], receipt: Any, evidence_digest: str, fence: int | None, now_ms: int
) -> tuple[Any, ...]: ...
def catalog_check_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Validates and normalises a stored row (used by scans that do not transition)."""

# --- codec (rust/src/bindings/codec.rs) ---
