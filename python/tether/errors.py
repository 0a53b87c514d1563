"""Tether's exception hierarchy, created in Rust (`tether._core`) and re-exported here."""

from tether._core import TetherError

# --- patch ---
# isort: split
# `__all__` is only assigned at the end of this file, so this section re-exports explicitly
# (`X as X`) instead of extending it; the names are importable from `tether.errors` either way.
from tether._core import InvalidDocument as InvalidDocument
from tether._core import InvalidPatch as InvalidPatch
from tether._core import PatchDoesNotApply as PatchDoesNotApply
from tether._core import PatchError as PatchError

# --- agui ---
# isort: split
# `__all__` is only assigned at the end of this file, so this section re-exports explicitly
# (`X as X`) instead of extending it; the names are importable from `tether.errors` either way.
from tether._core import AguiAttributionError as AguiAttributionError
from tether._core import AguiDecodeError as AguiDecodeError
from tether._core import AguiError as AguiError
from tether._core import AguiMalformedError as AguiMalformedError
from tether._core import AguiSequenceError as AguiSequenceError

# --- catalog ---
# `X as X` re-exports explicitly: `__all__` is assigned at the bottom of this file, so a
# section's `__all__ += [...]` would run before it exists. isort would split the aliases.
# isort: off
from tether._core import (
    AdmissionConflict as AdmissionConflict,
    AwaitingDecision as AwaitingDecision,
    BoundsExceeded as BoundsExceeded,
    CatalogConfigError as CatalogConfigError,
    CatalogRejection as CatalogRejection,
    CatalogStorageError as CatalogStorageError,
    EvidenceMismatch as EvidenceMismatch,
    InvalidDecision as InvalidDecision,
    LeaseExpired as LeaseExpired,
    NoResult as NoResult,
    NotAwaitingDecision as NotAwaitingDecision,
    NotBound as NotBound,
    NotClaimable as NotClaimable,
    NotReconciling as NotReconciling,
    OperationBound as OperationBound,
    OperationConflict as OperationConflict,
    ReceiptMismatch as ReceiptMismatch,
    ReconcileOnly as ReconcileOnly,
    ResultConflict as ResultConflict,
    SettlementConflict as SettlementConflict,
    StaleEvidenceRevision as StaleEvidenceRevision,
    StaleFence as StaleFence,
    TokenlessReceipt as TokenlessReceipt,
    UnknownActivity as UnknownActivity,
)
# isort: on


# --- codec ---
# isort: split
# `__all__` is only assigned at the end of this file, so this section re-exports explicitly
# (`X as X`) instead of extending it; the names are importable from `tether.errors` either way.
from tether._core import DxlDeviceError as DxlDeviceError
from tether._core import DxlError as DxlError
from tether._core import DxlFrameError as DxlFrameError
from tether._core import DxlIdentityError as DxlIdentityError
from tether._core import DxlPortBusy as DxlPortBusy
from tether._core import DxlTimeoutError as DxlTimeoutError
from tether._core import DxlTransportError as DxlTransportError
from tether._core import DxlUsageError as DxlUsageError
from tether._core import DxlWriteUnconfirmed as DxlWriteUnconfirmed
from tether._core import HostConfigError as HostConfigError
from tether._core import OperatorRejection as OperatorRejection

__all__ = ["TetherError"]  # each section above extends this list: __all__ += [...]
