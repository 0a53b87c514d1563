"""Tether's exception hierarchy, created in Rust (`tether._core`) and re-exported here."""

from tether._core import TetherError

# --- patch ---
# isort: split
from tether._core import InvalidDocument as InvalidDocument
from tether._core import InvalidPatch as InvalidPatch
from tether._core import PatchDoesNotApply as PatchDoesNotApply
from tether._core import PatchError as PatchError

# --- agui ---
# isort: split
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

# --- runtime ---
# World ledger and Activity runtime errors are Python subclasses of `TetherError`; `X as X`
# re-exports them for the same reason as the sections above.
# isort: off
from tether.world._errors import (
    HeadConflict as HeadConflict,
    InvalidWrite as InvalidWrite,
    PostCommitPending as PostCommitPending,
    ReceiptRejected as ReceiptRejected,
    StaleWriter as StaleWriter,
    UnsettledActivities as UnsettledActivities,
    WorldClosing as WorldClosing,
    WorldError as WorldError,
    WorldExists as WorldExists,
    WorldNotFound as WorldNotFound,
)
from tether.runtime._errors import (
    ActivityRuntimeError as ActivityRuntimeError,
    ArtifactCorrupt as ArtifactCorrupt,
    ArtifactError as ArtifactError,
    ArtifactMissing as ArtifactMissing,
    FamilyError as FamilyError,
    HostClosed as HostClosed,
    LeaseLost as LeaseLost,
    ProjectionConflict as ProjectionConflict,
    ProviderIOForbidden as ProviderIOForbidden,
)
# isort: on

# --- codec ---
# isort: split
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

# --- live ---
# isort: split
from tether._core import LiveEventError as LiveEventError
from tether._core import LiveEventInvalid as LiveEventInvalid
from tether._core import LiveUsageError as LiveUsageError

# Sections re-export with `X as X` (which mypy and readers treat as public); `__all__` names the
# root only, and a test checks every TetherError subclass in `tether._core` is importable here.
__all__ = ["TetherError"]
