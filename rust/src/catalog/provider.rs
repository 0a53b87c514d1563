//! Provider-side facts: binding the operation identity, and the reconciliation conclusions
//! "confirmed absent" and "unknown" (the third, "recovered", is `record_result`).

use super::attempt::{claim_on, live};
use super::bounds::{self, MAX_RETRY_AFTER_MS};
use super::identity::operation_id_for;
use super::record::{ActivityRecord, Binding, EvidenceRecord, GuardRecord, Now};
use super::rejection::{Rejection, RejectionKind};

/// Durably binds the provider operation identity before any external effect. The identity is
/// the activity's derived `operation_id_for(kind, world_id, activity_id)`: namespaced by kind and
/// world, stable for the activity's life, and so bound to exactly one activity without any
/// cross-record lookup. Any other id is an `operation_conflict`.
///
/// A successful bind is an adapter's signal that it may execute, so only an execute attempt
/// gets one: a reconcile-only attempt is refused (`reconcile_only`) even with the id that is
/// already bound. An execute attempt rebinding its own id is a no-op.
pub fn bind_provider_operation(
    rec: &ActivityRecord,
    fence: i64,
    operation_id: &str,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    bounds::operation_id(operation_id)?;
    let key = rec.key();
    let derived = operation_id_for(&key.kind, &key.world_id, &key.activity_id);
    if operation_id != derived {
        return Err(Rejection::on(
            RejectionKind::OperationConflict,
            "operation_id",
            format!("{operation_id} is not this activity's operation identity {derived}"),
        ));
    }
    let attempt = live(rec, fence, now)?;
    if !attempt.may_execute {
        return Err(Rejection::new(
            RejectionKind::ReconcileOnly,
            "a reconcile-only attempt binds nothing: a bind would let it execute",
        ));
    }
    if let Some(b) = rec.binding.as_ref() {
        if b.operation_id == operation_id {
            return Ok(rec.clone());
        }
        return Err(Rejection::on(
            RejectionKind::OperationConflict,
            "operation_id",
            format!(
                "operation {} is already bound to this activity",
                b.operation_id
            ),
        ));
    }
    let mut next = rec.next(now);
    next.binding = Some(Binding {
        operation_id: operation_id.to_owned(),
        fence,
        bound_at_ms: now.wall_ms,
    });
    Ok(next)
}

/// A claim (`claim_on`) and, when the attempt it issues may execute, the bind of the
/// activity's own operation identity to that attempt, on the same reading: what a worker
/// does before any effect when its provider operation id is the derived one. A reconcile-only
/// attempt comes back claimed and unbound (it must reconcile, never execute); any other
/// refusal of the claim or of the bind refuses the whole transition.
pub fn claim_and_bind_on(
    rec: &ActivityRecord,
    owner: &str,
    host: Option<&str>,
    lease_ms: i64,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    let claimed = claim_on(rec, owner, host, lease_ms, now)?;
    let key = claimed.key();
    let operation_id = operation_id_for(&key.kind, &key.world_id, &key.activity_id);
    match bind_provider_operation(&claimed, claimed.fence, &operation_id, now) {
        Err(r) if r.kind == RejectionKind::ReconcileOnly => Ok(claimed),
        bound => bound,
    }
}

fn reconciling(rec: &ActivityRecord, fence: i64, now: &Now) -> Result<(), Rejection> {
    if live(rec, fence, now)?.may_execute {
        return Err(Rejection::new(
            RejectionKind::NotReconciling,
            "only a reconcile attempt concludes absence or unknown",
        ));
    }
    Ok(())
}

/// Records a confirmed absence under the live reconcile fence, with the adapter's retry guard.
/// The attempt ends and the next claim may execute once.
pub fn confirm_absent(
    rec: &ActivityRecord,
    fence: i64,
    guard_ref: &str,
    guard_digest: &str,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    bounds::reference("guard.ref", guard_ref)?;
    bounds::digest("guard.digest", guard_digest)?;
    reconciling(rec, fence, now)?;
    let mut next = rec.next(now);
    next.retry_guard = Some(GuardRecord {
        guard_ref: guard_ref.to_owned(),
        digest: guard_digest.to_owned(),
        fence,
        recorded_at_ms: now.wall_ms,
        authorizes_execution: true,
    });
    next.awaiting_decision = false;
    next.attempt = None;
    next.claimable_from_ms = Some(now.boot_ms);
    Ok(next)
}

/// Records that reconciliation could not tell: the evidence revision rises, the activity awaits
/// an operator decision, and it may be claimed again (to reconcile only) after `retry_after_ms`
/// (0 to 7 days, `MAX_RETRY_AFTER_MS`) on the lease clock. A reconcile of an Activity already
/// awaiting a decision that names the very evidence it holds (the same ref and digest: the
/// adapter found nothing changed) keeps that evidence and its revision, so a decision an
/// operator is making on it stays valid; only the next reconcile is rescheduled.
pub fn record_unknown(
    rec: &ActivityRecord,
    fence: i64,
    evidence_ref: &str,
    evidence_digest: &str,
    retry_after_ms: i64,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    bounds::reference("evidence.ref", evidence_ref)?;
    bounds::digest("evidence.digest", evidence_digest)?;
    bounds::duration("retry_after_ms", retry_after_ms, 0, MAX_RETRY_AFTER_MS)?;
    let resume_at = bounds::later("retry_after_ms", now.boot_ms, retry_after_ms)?;
    reconciling(rec, fence, now)?;
    let mut next = rec.next(now);
    let unchanged = rec.awaiting_decision
        && rec
            .evidence
            .as_ref()
            .is_some_and(|e| e.evidence_ref == evidence_ref && e.digest == evidence_digest);
    if !unchanged {
        next.evidence = Some(EvidenceRecord {
            evidence_ref: evidence_ref.to_owned(),
            digest: evidence_digest.to_owned(),
            recorded_at_ms: now.wall_ms,
        });
        next.evidence_revision += 1;
    }
    next.awaiting_decision = true;
    next.attempt = None;
    next.claimable_from_ms = Some(resume_at);
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::attempt::claim;
    use crate::catalog::scenario_tests::{admission, admitted, at, bound};

    #[test]
    fn bind_is_idempotent_and_stable() {
        let rec = bound(0);
        let op = rec.binding.as_ref().unwrap().operation_id.clone();
        assert_eq!(bind_provider_operation(&rec, 1, &op, &at(1)).unwrap(), rec);
        assert_eq!(
            bind_provider_operation(&rec, 1, "other", &at(1))
                .unwrap_err()
                .kind,
            RejectionKind::OperationConflict
        );
        assert_eq!(
            bind_provider_operation(&rec, 0, &op, &at(1))
                .unwrap_err()
                .kind,
            RejectionKind::StaleFence
        );
    }

    #[test]
    fn reconcile_only_attempts_cannot_bind_and_execute_attempts_cannot_conclude() {
        let rec = claim(&bound(0), "w2", 100, &at(1000)).unwrap();
        assert_eq!(
            bind_provider_operation(&rec, 2, "other", &at(1001))
                .unwrap_err()
                .kind,
            RejectionKind::OperationConflict
        );
        // Not even the id already bound: a successful bind is the signal to execute.
        let op = rec.binding.as_ref().unwrap().operation_id.clone();
        assert_eq!(
            bind_provider_operation(&rec, 2, &op, &at(1001))
                .unwrap_err()
                .kind,
            RejectionKind::ReconcileOnly
        );
        let fresh = claim(&admitted(&admission("w", "k", "a"), 0), "w1", 100, &at(0)).unwrap();
        assert_eq!(
            confirm_absent(&fresh, 1, "g", "d", &at(1))
                .unwrap_err()
                .kind,
            RejectionKind::NotReconciling
        );
        assert_eq!(
            record_unknown(&fresh, 1, "e", "d", 0, &at(1))
                .unwrap_err()
                .kind,
            RejectionKind::NotReconciling
        );
    }

    #[test]
    fn claim_and_bind_is_the_claim_then_the_bind_of_the_derived_identity() {
        let fresh = admitted(&admission("w", "k", "a"), 0);
        let fused = claim_and_bind_on(&fresh, "w1", None, 100, &at(5)).unwrap();
        let claimed = claim(&fresh, "w1", 100, &at(5)).unwrap();
        let op = operation_id_for("k", "w", "a");
        let bound = bind_provider_operation(&claimed, claimed.fence, &op, &at(5)).unwrap();
        assert_eq!(fused, bound);
        // A reconcile-only attempt: claimed, and left unbound.
        let rec = claim_and_bind_on(&bound, "w2", None, 100, &at(1000)).unwrap();
        assert_eq!(rec, claim(&bound, "w2", 100, &at(1000)).unwrap());
        assert!(!rec.attempt.as_ref().unwrap().may_execute);
        // A claim the core refuses refuses the whole transition.
        assert_eq!(
            claim_and_bind_on(&bound, "w2", None, 100, &at(50))
                .unwrap_err()
                .kind,
            RejectionKind::NotClaimable
        );
    }

    #[test]
    fn confirmed_absence_authorises_exactly_one_fresh_execution() {
        let rec = claim(&bound(0), "w2", 100, &at(1000)).unwrap();
        let absent = confirm_absent(&rec, 2, "guard://1", "sha256:g", &at(1010)).unwrap();
        assert_eq!(absent.claimable_from_ms, Some(1010));
        let exec = claim(&absent, "w3", 100, &at(1010)).unwrap();
        assert!(exec.attempt.as_ref().unwrap().may_execute);
        assert!(!exec.retry_guard.as_ref().unwrap().authorizes_execution);
        let after = claim(&exec, "w4", 100, &at(2000)).unwrap();
        assert!(
            !after.attempt.as_ref().unwrap().may_execute,
            "the guard was used up"
        );
    }

    #[test]
    fn unknown_raises_the_revision_and_backs_off() {
        let rec = claim(&bound(0), "w2", 100, &at(1000)).unwrap();
        let unknown = record_unknown(&rec, 2, "ev://1", "sha256:e", 500, &at(1010)).unwrap();
        assert_eq!(unknown.evidence_revision, 1);
        assert!(unknown.awaiting_decision);
        assert!(unknown.attempt.is_none());
        assert_eq!(
            claim(&unknown, "w3", 100, &at(1200)).unwrap_err().kind,
            RejectionKind::AwaitingDecision
        );
        let again = claim(&unknown, "w3", 100, &at(1510)).unwrap();
        assert!(!again.attempt.as_ref().unwrap().may_execute);
    }

    #[test]
    fn the_same_evidence_again_keeps_its_revision_other_evidence_raises_it() {
        let rec = claim(&bound(0), "w2", 100, &at(1000)).unwrap();
        let first = record_unknown(&rec, 2, "ev://1", "sha256:e", 500, &at(1010)).unwrap();
        let again = claim(&first, "w3", 100, &at(1510)).unwrap();
        let fence = again.fence;
        // Nothing changed: the revision an operator is deciding on stays, from its first time.
        let same = record_unknown(&again, fence, "ev://1", "sha256:e", 500, &at(1520)).unwrap();
        assert_eq!(same.evidence_revision, 1);
        assert_eq!(same.evidence, first.evidence);
        assert!(same.awaiting_decision && same.attempt.is_none());
        assert_eq!(same.claimable_from_ms, Some(2020)); // the next reconcile, rescheduled
                                                        // Other evidence is a new revision.
        let third = claim(&same, "w4", 100, &at(2030)).unwrap();
        let fence = third.fence;
        let other = record_unknown(&third, fence, "ev://2", "sha256:f", 500, &at(2040)).unwrap();
        assert_eq!(other.evidence_revision, 2);
    }
}
