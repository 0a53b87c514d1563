"""`record_unknown` and the operator's `resolve`: revisions, single use, fencing, guards."""

from __future__ import annotations

import pytest
from tether.activities import ABANDONED_MEDIA_TYPE, Catalog, Claim, Decision, Evidence, RetryGuard
from tether.errors import (
    AwaitingDecision,
    InvalidDecision,
    NotAwaitingDecision,
    NotReconciling,
    StaleEvidenceRevision,
    StaleFence,
)

from tests.activities.support import (
    ManualClock,
    admission,
    evidence_for,
    key,
    receipt,
    reconciling,
    result,
)


def _reconciling(catalog: Catalog, clock: ManualClock) -> Claim:
    """An activity whose bound execute attempt expired, now under a reconcile-only attempt."""
    return reconciling(catalog, clock, key())[1]


def _unknown(catalog: Catalog, clock: ManualClock, backoff: int = 5_000) -> Claim:
    c = _reconciling(catalog, clock)
    rec = catalog.record_unknown(c.key, c.fence, Evidence("ev://1", "sha256:e1"), backoff)
    assert rec.awaiting_decision and rec.evidence_revision == 1 and rec.attempt is None
    return c


def test_record_unknown_waits_out_the_backoff_and_only_reconciles(
    catalog: Catalog, clock: ManualClock
) -> None:
    c = _unknown(catalog, clock, backoff=5_000)
    assert catalog.claim("w", 1_000) is None
    assert [r.key for r in catalog.iter_awaiting_decision()] == [c.key]
    clock.advance(5_000)
    again = catalog.claim("w", 1_000)
    assert again is not None and not again.attempt.may_execute
    rec = catalog.record_unknown(again.key, again.fence, Evidence("ev://2", "sha256:e2"), 0)
    assert rec.evidence_revision == 2


def test_an_execute_attempt_cannot_record_unknown(catalog: Catalog) -> None:
    k = key()
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000)
    assert c is not None
    with pytest.raises(NotReconciling):
        catalog.record_unknown(k, c.fence, Evidence("ev://1", "sha256:e"), 0)


def test_a_decision_on_a_stale_revision_is_rejected(catalog: Catalog, clock: ManualClock) -> None:
    c = _unknown(catalog, clock, backoff=0)
    decision = Decision.abandon(evidence_revision=1, operator="ops", note="robot parked")
    again = catalog.claim("w", 1_000)
    assert again is not None
    catalog.record_unknown(c.key, again.fence, Evidence("ev://2", "sha256:e2"), 0)
    before = catalog.get(c.key)
    with pytest.raises(StaleEvidenceRevision):
        catalog.resolve(c.key, decision)
    assert catalog.get(c.key) == before


def test_a_decision_is_usable_once(catalog: Catalog, clock: ManualClock) -> None:
    c = _unknown(catalog, clock)
    d = Decision.recovered(result("found"), evidence_revision=1, operator="ops", note="in bucket")
    rec = catalog.resolve(c.key, d)
    assert rec.result == result("found") and rec.decision is not None
    assert rec.decision.operator == "ops" and rec.decision.decided_at_ms == clock.now_ms
    assert rec.decision.note == "in bucket" and rec.decision.evidence_revision == 1
    with pytest.raises(NotAwaitingDecision):
        catalog.resolve(c.key, d)


def test_a_decision_fences_out_every_older_attempt(catalog: Catalog, clock: ManualClock) -> None:
    c = _unknown(catalog, clock, backoff=0)
    live = catalog.claim("w-live", 60_000)
    assert live is not None
    guard = RetryGuard("provider://fence/7", "sha256:proof")
    rec = catalog.resolve(c.key, Decision.absent(guard, evidence_revision=1, operator="ops"))
    assert rec.fence > live.fence and rec.attempt is None
    for fence in (c.fence, live.fence):
        with pytest.raises(StaleFence):
            catalog.record_result(c.key, fence, result())
        with pytest.raises(StaleFence):
            catalog.renew(c.key, fence, 1_000)
    fresh = catalog.claim("w-fresh", 1_000)
    assert fresh is not None and fresh.attempt.may_execute, "the guard authorises one execution"


def test_absent_without_a_retry_guard_is_rejected(catalog: Catalog, clock: ManualClock) -> None:
    c = _unknown(catalog, clock)
    with pytest.raises(InvalidDecision):
        catalog.resolve(c.key, Decision("absent", 1, "ops", "trust me"))
    with pytest.raises(InvalidDecision):
        catalog.resolve(c.key, Decision("recovered", 1, "ops"))
    with pytest.raises(InvalidDecision):
        catalog.resolve(c.key, Decision("maybe", 1, "ops"))  # type: ignore[arg-type]
    assert catalog.get(c.key) is not None and catalog.get(c.key).awaiting_decision  # type: ignore[union-attr]


def test_abandon_records_a_failed_result_that_settles(catalog: Catalog, clock: ManualClock) -> None:
    c = _unknown(catalog, clock)
    rec = catalog.resolve(c.key, Decision.abandon(evidence_revision=1, operator="ops"))
    assert rec.result is not None and rec.result.failed
    assert rec.result.media_type == ABANDONED_MEDIA_TYPE == "application/vnd.tether.abandoned"
    assert rec.recorded_result is not None and rec.recorded_result.attempt == 0
    assert [r.key for r in catalog.iter_pending_observation()] == [c.key]
    catalog.settle(c.key, receipt(9), evidence_for(c.key, rec.result))
    assert not catalog.has_unsettled("w1")


def test_resolve_without_a_pending_decision_is_rejected(catalog: Catalog) -> None:
    k = key()
    catalog.admit(admission(k))
    with pytest.raises(NotAwaitingDecision):
        catalog.resolve(k, Decision.abandon(evidence_revision=0, operator="ops"))


def test_reconciliation_may_still_conclude_while_a_decision_is_pending(
    catalog: Catalog, clock: ManualClock
) -> None:
    c = _unknown(catalog, clock, backoff=100)
    assert catalog.claim("w", 1_000) is None  # storage never offers it inside the backoff
    with pytest.raises(AwaitingDecision):
        catalog.claim_key(c.key, "w", 1_000)  # and the core refuses it when asked by key
    clock.advance(100)
    again = catalog.claim("w", 1_000)
    assert again is not None
    rec = catalog.record_result(c.key, again.fence, result("recovered"))
    assert not rec.awaiting_decision
    with pytest.raises(NotAwaitingDecision):
        catalog.resolve(c.key, Decision.abandon(evidence_revision=1, operator="ops"))


def test_refresh_evidence_records_a_new_revision_and_refuses_the_old_decision(
    catalog: Catalog, clock: ManualClock
) -> None:
    c = _unknown(catalog, clock)
    before = catalog.get(c.key)
    assert before is not None
    fresh = catalog.refresh_evidence(c.key, 1, Evidence("ev://2", "sha256:e2"))
    assert fresh.evidence_revision == 2 and fresh.awaiting_decision
    assert fresh.evidence is not None
    assert fresh.evidence.evidence == Evidence("ev://2", "sha256:e2")
    assert fresh.fence == before.fence and fresh.claimable_from_ms == before.claimable_from_ms
    old = Decision.abandon(evidence_revision=1, operator="ops", note="")
    with pytest.raises(StaleEvidenceRevision):
        catalog.resolve(c.key, old)
    with pytest.raises(StaleEvidenceRevision):
        catalog.refresh_evidence(c.key, 1, Evidence("ev://3", "sha256:e3"))
    assert catalog.get(c.key) == fresh
    catalog.resolve(c.key, Decision.abandon(evidence_revision=2, operator="ops", note=""))
    with pytest.raises(NotAwaitingDecision):
        catalog.refresh_evidence(c.key, 2, Evidence("ev://3", "sha256:e3"))


def test_refresh_evidence_needs_a_decision_to_be_awaited(catalog: Catalog) -> None:
    k = key()
    catalog.admit(admission(k))
    with pytest.raises(NotAwaitingDecision):
        catalog.refresh_evidence(k, 0, Evidence("ev://1", "sha256:e1"))
