"""Build the typed `ActivityRecord` view from a flat catalog row (layout owned by the Rust core)."""

from __future__ import annotations

from dataclasses import fields
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

# `ActivityRecord` is a frozen slots dataclass without `__post_init__`: its `__init__` only
# stores each field, through `object.__setattr__` (a type lookup per field). The record view is
# built on every catalog call, so it stores its fields through the slots' own setters instead:
# the same object, in about half the time. `test_record_view_is_the_dataclass` checks that
# every field is set and equal to what `__init__` stores.
_new = object.__new__
(
    _key,
    _source,
    _input_ref,
    _input_digest,
    _admitted_at_ms,
    _fence,
    _attempt_count,
    _attempt,
    _operation_id,
    _operation_bound_at_ms,
    _retry_guard,
    _result,
    _recorded_result,
    _evidence,
    _evidence_revision,
    _awaiting_decision,
    _decision,
    _settlement,
    _claimable_from_ms,
    _lease_boot_id,
    _pending_observation,
    _unsettled,
    _version,
    _compacted_at_ms,
    _compactable_from_ms,
    _compacted_result_failed,
    _bound_host,
) = (getattr(ActivityRecord, f.name).__set__ for f in fields(ActivityRecord))


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
        bound_host,
    ) = row
    result = recorded = None
    if result_ref is not None:
        result = ResultRef(
            result_ref, result_digest, result_media_type, result_size, result_failed == 1
        )
        recorded = RecordedResult(result, result_attempt, result_fence, result_at_ms)
    rec = _new(ActivityRecord)
    _key(rec, ActivityKey(world_id, kind, activity_id))
    _source(rec, Receipt(world_id, source_run_id, source_tick, source_token))
    _input_ref(rec, input_ref)
    _input_digest(rec, input_digest)
    _admitted_at_ms(rec, admitted_at_ms)
    _fence(rec, fence)
    _attempt_count(rec, attempt_count)
    _attempt(
        rec,
        None
        if attempt_owner is None
        else Attempt(attempt_count, fence, attempt_owner, lease_expires_ms, may_execute == 1),
    )
    _operation_id(rec, operation_id)
    _operation_bound_at_ms(rec, bound_at_ms)
    _retry_guard(
        rec,
        None
        if guard_ref is None
        else RecordedGuard(
            RetryGuard(guard_ref, guard_digest), guard_fence, guard_at_ms, retry_authorized == 1
        ),
    )
    _result(rec, result)
    _recorded_result(rec, recorded)
    _evidence(
        rec,
        None
        if evidence_ref is None
        else RecordedEvidence(Evidence(evidence_ref, evidence_digest), evidence_at_ms),
    )
    _evidence_revision(rec, evidence_revision)
    _awaiting_decision(rec, awaiting_decision == 1)
    _decision(
        rec,
        None
        if decision_outcome is None
        else OperatorDecision(
            decision_outcome, decision_revision, decision_operator, decision_at_ms, decision_note
        ),
    )
    _settlement(
        rec,
        None
        if settled_run_id is None
        else Settlement(
            Receipt(world_id, settled_run_id, settled_tick, settled_token),
            settlement_evidence_digest,
            settled_at_ms,
        ),
    )
    _claimable_from_ms(rec, claimable_from_ms)
    _lease_boot_id(rec, lease_boot_id)
    _pending_observation(rec, pending_observation == 1)
    _unsettled(rec, unsettled == 1)
    _version(rec, version)
    _compacted_at_ms(rec, compacted_at_ms)
    _compactable_from_ms(rec, compactable_from_ms)
    _compacted_result_failed(rec, result_ref is None and result_failed == 1)
    _bound_host(rec, bound_host)
    return rec
