"""The world ledger: worlds, runs, atomic ticks, committed receipts and the fail-closed reader."""

from tether.world._errors import (
    RECEIPT_REJECTION_CODES,
    HeadConflict,
    InvalidWrite,
    PostCommitPending,
    ReceiptRejected,
    StaleWriter,
    UnsettledActivities,
    WorldClosing,
    WorldError,
    WorldExists,
    WorldNotFound,
)
from tether.world._port import WorldLedger
from tether.world._sqlite import SqliteLedger
from tether.world._types import (
    CommittedTickReceipt,
    ComponentWrite,
    JSONValue,
    WorldSnapshot,
    Writer,
    canonical_json,
    digest_of,
)

__all__ = [
    "RECEIPT_REJECTION_CODES",
    "CommittedTickReceipt",
    "ComponentWrite",
    "HeadConflict",
    "InvalidWrite",
    "JSONValue",
    "PostCommitPending",
    "ReceiptRejected",
    "SqliteLedger",
    "StaleWriter",
    "UnsettledActivities",
    "WorldClosing",
    "WorldError",
    "WorldExists",
    "WorldLedger",
    "WorldNotFound",
    "WorldSnapshot",
    "Writer",
    "canonical_json",
    "digest_of",
]
