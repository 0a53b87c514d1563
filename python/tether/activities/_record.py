"""Build the typed `ActivityRecord` view from a flat catalog row (layout owned by the Rust core)."""

from __future__ import annotations

from typing import Any

from tether._core import catalog_columns
from tether.activities._types import (
    ActivityKey,
    ActivityRecord,
    Attempt,
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

Row = tuple[Any, ...]

COLUMNS: tuple[str, ...] = tuple(catalog_columns())
VERSION = COLUMNS.index("version")


def record_from_row(row: Row) -> ActivityRecord:
    """The typed view of a row the Rust core produced or validated."""
    (
        world_id,
        kind,
        activity_id,
        source_run_id,
        source_tick,
        source_token,
        input_ref,
        input_digest,
        admitted_at_ms,
        fence,
        attempt_count,
        attempt_owner,
        lease_expires_ms,
        may_execute,
        operation_id,
        _operation_fence,
        bound_at_ms,
        guard_ref,
        guard_digest,
        guard_fence,
        guard_at_ms,
        retry_authorized,
        result_ref,
        result_digest,
        result_media_type,
        result_size,
        result_failed,
        result_attempt,
        result_fence,
        result_at_ms,
        evidence_ref,
        evidence_digest,
        evidence_revision,
        evidence_at_ms,
        awaiting_decision,
        decision_outcome,
        decision_revision,
        decision_operator,
        decision_at_ms,
        decision_note,
        settled_run_id,
        settled_tick,
        settled_token,
        settlement_evidence_digest,
        settled_at_ms,
        claimable_from_ms,
        lease_boot_id,
        pending_observation,
        unsettled,
        version,
        compacted_at_ms,
        compactable_from_ms,
    ) = row
    result = recorded = None
    if result_ref is not None:
        result = ResultRef(
            result_ref, result_digest, result_media_type, result_size, result_failed == 1
        )
        recorded = RecordedResult(result, result_attempt, result_fence, result_at_ms)
    # Positional, in field order: this runs once per catalog call, keyword passing costs more.
    return ActivityRecord(
        ActivityKey(world_id, kind, activity_id),
        Receipt(world_id, source_run_id, source_tick, source_token),
        input_ref,
        input_digest,
        admitted_at_ms,
        fence,
        attempt_count,
        None
        if attempt_owner is None
        else Attempt(attempt_count, fence, attempt_owner, lease_expires_ms, may_execute == 1),
        operation_id,
        bound_at_ms,
        None
        if guard_ref is None
        else RecordedGuard(
            RetryGuard(guard_ref, guard_digest), guard_fence, guard_at_ms, retry_authorized == 1
        ),
        result,
        recorded,
        None
        if evidence_ref is None
        else RecordedEvidence(Evidence(evidence_ref, evidence_digest), evidence_at_ms),
        evidence_revision,
        awaiting_decision == 1,
        None
        if decision_outcome is None
        else OperatorDecision(
            decision_outcome, decision_revision, decision_operator, decision_at_ms, decision_note
        ),
        None
        if settled_run_id is None
        else Settlement(
            Receipt(world_id, settled_run_id, settled_tick, settled_token),
            settlement_evidence_digest,
            settled_at_ms,
        ),
        claimable_from_ms,
        lease_boot_id,
        pending_observation == 1,
        unsettled == 1,
        version,
        compacted_at_ms,
        compactable_from_ms,
        result_ref is None and result_failed == 1,
    )
