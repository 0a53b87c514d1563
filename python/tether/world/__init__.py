"""The world ledger: worlds, runs, atomic ticks, committed receipts and the fail-closed reader.

Every world rule (writer epoch, head CAS, post-commit mark, sticky close, the receipt reader)
is in `tether.world.rules`; each ledger reports facts and persists what those rules decide.
"""

from tether.world import _rules as rules
from tether.world._errors import (
    RECEIPT_REJECTION_CODES,
    HeadConflict,
    InvalidWrite,
    LedgerClosed,
    LedgerCommitUnknown,
    PostCommitPending,
    ReceiptRejected,
    StaleWriter,
    UnsettledActivities,
    WorldClosing,
    WorldError,
    WorldExists,
    WorldNotFound,
    WorldStorageError,
)
from tether.world._open import open_ledger
from tether.world._port import WorldLedger
from tether.world._rules import HeadFacts, WorldFacts, judge_receipt, receipt_token
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
    "rules",
    "RECEIPT_REJECTION_CODES",
    "CommittedTickReceipt",
    "ComponentWrite",
    "HeadConflict",
    "HeadFacts",
    "InvalidWrite",
    "JSONValue",
    "LedgerClosed",
    "LedgerCommitUnknown",
    "PostCommitPending",
    "ReceiptRejected",
    "SqliteLedger",
    "StaleWriter",
    "UnsettledActivities",
    "WorldClosing",
    "WorldError",
    "WorldExists",
    "WorldFacts",
    "WorldLedger",
    "WorldNotFound",
    "WorldStorageError",
    "WorldSnapshot",
    "Writer",
    "canonical_json",
    "digest_of",
    "judge_receipt",
    "open_ledger",
    "receipt_token",
]
