"""Tether's exception hierarchy, rooted at `TetherError` and re-exported here.

Errors the Rust core raises are created in Rust (`tether._core`); errors born in Python
(configuration, transport, devices, operator, world, runtime) are Python classes with fields.
Importing this module loads no runtime, world or storage module: their errors are re-exported
lazily, on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

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

# --- live ---
# isort: split
from tether._core import LiveEventError as LiveEventError
from tether._core import LiveEventInvalid as LiveEventInvalid
from tether._core import LiveUsageError as LiveUsageError

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
    Compacted as Compacted,
    EvidenceMismatch as EvidenceMismatch,
    InvalidDecision as InvalidDecision,
    InvalidRefusal as InvalidRefusal,
    LeaseExpired as LeaseExpired,
    NoResult as NoResult,
    NotAwaitingDecision as NotAwaitingDecision,
    NotBound as NotBound,
    NotClaimable as NotClaimable,
    NotCompactable as NotCompactable,
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
    WrongHost as WrongHost,
)
# isort: on


# --- born in Python: the DYNAMIXEL codec's errors, configuration, directories, transport and
# devices, operator ---
# Each carries `code`, `message` and `details` (`tether._coded.CodedError`).
# isort: split
from tether._codec_errors import DxlError as DxlError
from tether._codec_errors import DxlFrameError as DxlFrameError
from tether._codec_errors import DxlUsageError as DxlUsageError
from tether._coded import CodedError as CodedError
from tether._config import HostConfigError as HostConfigError
from tether._dirs import DataDirError as DataDirError
from tether.operations._errors import JournalError as JournalError
from tether.operator.errors import OperatorRejection as OperatorRejection
from tether.transport import DeviceError as DeviceError
from tether.transport import DeviceIdentityError as DeviceIdentityError
from tether.transport import DeviceSetupError as DeviceSetupError
from tether.transport import PortBusy as PortBusy
from tether.transport import PortLost as PortLost
from tether.transport import TransportError as TransportError
from tether.transport import TransportTimeout as TransportTimeout
from tether.transport import WriteUnconfirmed as WriteUnconfirmed

# --- runtime ---
# World ledger and Activity runtime errors are Python subclasses of `TetherError`. They are
# re-exported lazily (PEP 562 `__getattr__` below), so importing `tether.errors` never loads the
# world, runtime or storage packages; the type checker reads them from these imports.
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "HeadConflict",
            "InvalidWrite",
            "LedgerClosed",
            "LedgerCommitUnknown",
            "PostCommitPending",
            "ReceiptRejected",
            "StaleWriter",
            "UnsettledActivities",
            "WorldClosing",
            "WorldError",
            "WorldExists",
            "WorldNotFound",
            "WorldStorageError",
        ),
        "tether.world._errors",
    ),
    **dict.fromkeys(
        (
            "ActivityRuntimeError",
            "ArtifactCorrupt",
            "ArtifactError",
            "ArtifactMissing",
            "FamilyError",
            "HostClosed",
            "LeaseLost",
            "ProjectionConflict",
            "ProviderIOForbidden",
            "WorldOfAnotherHost",
        ),
        "tether.runtime._errors",
    ),
    **dict.fromkeys(
        (
            "CommitUnknown",
            "MigrationLockTimeout",
            "MixedStores",
            "NoSuchSchema",
            "SameStoreFile",
            "SchemaDenied",
            "SchemaOutdated",
            "StoreDamaged",
        ),
        "tether.storage._errors",
    ),
}
if TYPE_CHECKING:
    # isort: off
    from tether.world._errors import (
        HeadConflict as HeadConflict,
        InvalidWrite as InvalidWrite,
        LedgerClosed as LedgerClosed,
        LedgerCommitUnknown as LedgerCommitUnknown,
        PostCommitPending as PostCommitPending,
        ReceiptRejected as ReceiptRejected,
        StaleWriter as StaleWriter,
        UnsettledActivities as UnsettledActivities,
        WorldClosing as WorldClosing,
        WorldError as WorldError,
        WorldExists as WorldExists,
        WorldNotFound as WorldNotFound,
        WorldStorageError as WorldStorageError,
    )
    from tether.storage._errors import CommitUnknown as CommitUnknown
    from tether.storage._errors import MigrationLockTimeout as MigrationLockTimeout
    from tether.storage._errors import MixedStores as MixedStores
    from tether.storage._errors import NoSuchSchema as NoSuchSchema
    from tether.storage._errors import SameStoreFile as SameStoreFile
    from tether.storage._errors import SchemaDenied as SchemaDenied
    from tether.storage._errors import SchemaOutdated as SchemaOutdated
    from tether.storage._errors import StoreDamaged as StoreDamaged
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
        WorldOfAnotherHost as WorldOfAnotherHost,
    )
    # isort: on


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


# Sections re-export with `X as X` (which mypy and readers treat as public); `__all__` names the
# root only, and a test checks every TetherError subclass in `tether._core` is importable here.
__all__ = ["TetherError"]
