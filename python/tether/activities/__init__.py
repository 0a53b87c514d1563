"""The Activity catalog: durable, fenced coordination of work between committed ticks."""

from tether._core import catalog_rejection_codes
from tether.activities._catalog import (
    Catalog,
    Clock,
    operation_id_for,
    settlement_evidence_digest,
    wall_clock_ms,
)
from tether.activities._types import (
    ActivityKey,
    ActivityRecord,
    Admission,
    Attempt,
    Claim,
    Decision,
    DecisionOutcome,
    Evidence,
    OperatorDecision,
    Receipt,
    RecordedEvidence,
    RecordedGuard,
    RecordedResult,
    ResultRef,
    RetryGuard,
    Settlement,
)

REJECTION_CODES: tuple[str, ...] = tuple(catalog_rejection_codes())

__all__ = [
    "REJECTION_CODES",
    "ActivityKey",
    "ActivityRecord",
    "Admission",
    "Attempt",
    "Catalog",
    "Claim",
    "Clock",
    "Decision",
    "DecisionOutcome",
    "Evidence",
    "OperatorDecision",
    "Receipt",
    "RecordedEvidence",
    "RecordedGuard",
    "RecordedResult",
    "ResultRef",
    "RetryGuard",
    "Settlement",
    "operation_id_for",
    "settlement_evidence_digest",
    "wall_clock_ms",
]
