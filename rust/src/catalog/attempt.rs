//! Attempts: `claim`, `renew`, `release`, and the live-fence check every other transition uses.

use super::bounds::{self, MAX_LEASE_MS};
use super::record::{ActivityRecord, Attempt};
use super::rejection::{Rejection, RejectionKind};

/// The current attempt, if `fence` names it and its lease is live at `now_ms`.
pub(crate) fn live(rec: &ActivityRecord, fence: i64, now_ms: i64) -> Result<&Attempt, Rejection> {
    if fence != rec.fence {
        return Err(Rejection::on(
            RejectionKind::StaleFence,
            "fence",
            format!("fence {fence} is not the current fence {}", rec.fence),
        ));
    }
    let Some(attempt) = rec.attempt.as_ref() else {
        return Err(Rejection::on(
            RejectionKind::StaleFence,
            "fence",
            format!("the attempt under fence {fence} has ended"),
        ));
    };
    if now_ms >= attempt.lease_expires_ms {
        return Err(Rejection::on(
            RejectionKind::LeaseExpired,
            "fence",
            format!(
                "the lease of fence {fence} expired at {}",
                attempt.lease_expires_ms
            ),
        ));
    }
    Ok(attempt)
}

/// Whether a claim now would be allowed to execute (rather than only reconcile). An activity
/// awaiting a decision is never claimed for execution, whatever else the record says.
pub(crate) fn execution_authorized(rec: &ActivityRecord) -> bool {
    !rec.awaiting_decision
        && (rec.binding.is_none()
            || rec
                .retry_guard
                .as_ref()
                .is_some_and(|g| g.authorizes_execution))
}

/// Checks claim arguments on their own, so a claim with bad arguments is refused even when
/// nothing is claimable; returns the lease expiry a claim at `now_ms` would get.
pub fn check_claim(owner: &str, lease_ms: i64, now_ms: i64) -> Result<i64, Rejection> {
    bounds::id("owner", owner)?;
    bounds::duration("lease_ms", lease_ms, 1, MAX_LEASE_MS)?;
    bounds::later("lease_ms", now_ms, lease_ms)
}

/// Issues a new attempt under the next fence.
///
/// The attempt may execute only if no provider operation is bound, or if a confirmed absence
/// with a retry guard authorises one fresh execution (the guard is then used up). Otherwise it is
/// reconcile-only. A record is claimable exactly when `claimable_from_ms <= now_ms`.
pub fn claim(
    rec: &ActivityRecord,
    owner: &str,
    lease_ms: i64,
    now_ms: i64,
) -> Result<ActivityRecord, Rejection> {
    let lease_expires_ms = check_claim(owner, lease_ms, now_ms)?;
    // The two "never" rules are checked on the facts themselves, not only through the derived
    // `claimable_from_ms`: a stored row that disagrees with itself fails closed.
    if rec.result.is_some() {
        return Err(Rejection::new(
            RejectionKind::NotClaimable,
            "a result is recorded; the activity is never claimed again",
        ));
    }
    if rec.has_live_attempt(now_ms) {
        return Err(Rejection::new(
            RejectionKind::NotClaimable,
            format!("fence {} holds a live lease", rec.fence),
        ));
    }
    match rec.claimable_from_ms {
        None => {
            return Err(Rejection::new(
                RejectionKind::NotClaimable,
                "a result is recorded; the activity is never claimed again",
            ))
        }
        Some(from) if from > now_ms => {
            if rec.awaiting_decision {
                return Err(Rejection::new(
                    RejectionKind::AwaitingDecision,
                    format!("awaiting a decision; reconciliation may resume at {from}"),
                ));
            }
            return Err(Rejection::new(
                RejectionKind::NotClaimable,
                format!("not claimable before {from}"),
            ));
        }
        Some(_) => {}
    }
    let may_execute = execution_authorized(rec);
    let mut next = rec.next();
    if may_execute && next.binding.is_some() {
        if let Some(guard) = next.retry_guard.as_mut() {
            guard.authorizes_execution = false;
        }
    }
    next.fence += 1;
    next.attempt_count += 1;
    next.attempt = Some(Attempt {
        number: next.attempt_count,
        owner: owner.to_owned(),
        lease_expires_ms,
        may_execute,
    });
    next.claimable_from_ms = Some(lease_expires_ms);
    Ok(next)
}

/// Extends the live attempt's lease to `now_ms + lease_ms`.
pub fn renew(
    rec: &ActivityRecord,
    fence: i64,
    lease_ms: i64,
    now_ms: i64,
) -> Result<ActivityRecord, Rejection> {
    bounds::duration("lease_ms", lease_ms, 1, MAX_LEASE_MS)?;
    let lease_expires_ms = bounds::later("lease_ms", now_ms, lease_ms)?;
    live(rec, fence, now_ms)?;
    let mut next = rec.next();
    if let Some(attempt) = next.attempt.as_mut() {
        attempt.lease_expires_ms = lease_expires_ms;
    }
    next.claimable_from_ms = Some(lease_expires_ms);
    Ok(next)
}

/// Gives up the live attempt. Only an execute attempt that bound nothing may: once a provider
/// operation is bound, an effect may exist and only reconciliation can say.
pub fn release(rec: &ActivityRecord, fence: i64, now_ms: i64) -> Result<ActivityRecord, Rejection> {
    let attempt = live(rec, fence, now_ms)?;
    if !attempt.may_execute {
        return Err(Rejection::new(
            RejectionKind::ReconcileOnly,
            "a reconcile-only attempt concludes with a result, an absence or unknown evidence",
        ));
    }
    if let Some(b) = rec.binding.as_ref() {
        return Err(Rejection::new(
            RejectionKind::OperationBound,
            format!(
                "provider operation {} is bound; reconcile instead",
                b.operation_id
            ),
        ));
    }
    let mut next = rec.next();
    next.attempt = None;
    next.claimable_from_ms = Some(now_ms);
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::scenario_tests::{admission, admitted, bound};

    #[test]
    fn claim_issues_increasing_fences_and_holds_a_lease() {
        let rec = admitted(&admission("w", "k", "a"), 0);
        let c1 = claim(&rec, "w1", 100, 0).unwrap();
        assert_eq!(c1.fence, 1);
        assert!(c1.attempt.as_ref().unwrap().may_execute);
        assert_eq!(c1.claimable_from_ms, Some(100));
        assert_eq!(
            claim(&c1, "w2", 100, 50).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        let c2 = claim(&c1, "w2", 100, 100).unwrap();
        assert_eq!(c2.fence, 2);
        assert_eq!(c2.attempt_count, 2);
        assert!(
            c2.attempt.as_ref().unwrap().may_execute,
            "unbound: may execute again"
        );
    }

    #[test]
    fn renew_and_release_need_the_live_fence() {
        let rec = claim(&admitted(&admission("w", "k", "a"), 0), "w1", 100, 0).unwrap();
        let renewed = renew(&rec, 1, 500, 50).unwrap();
        assert_eq!(renewed.claimable_from_ms, Some(550));
        assert_eq!(
            renew(&rec, 0, 500, 50).unwrap_err().kind,
            RejectionKind::StaleFence
        );
        assert_eq!(
            renew(&rec, 1, 500, 100).unwrap_err().kind,
            RejectionKind::LeaseExpired
        );
        let released = release(&rec, 1, 10).unwrap();
        assert!(released.attempt.is_none());
        assert_eq!(released.claimable_from_ms, Some(10));
        assert_eq!(
            release(&released, 1, 10).unwrap_err().kind,
            RejectionKind::StaleFence
        );
    }

    #[test]
    fn bound_attempts_cannot_release() {
        let rec = bound(0);
        assert_eq!(
            release(&rec, 1, 1).unwrap_err().kind,
            RejectionKind::OperationBound
        );
        let again = claim(&rec, "w2", 100, 1000).unwrap();
        assert!(!again.attempt.as_ref().unwrap().may_execute);
        assert_eq!(
            release(&again, 2, 1001).unwrap_err().kind,
            RejectionKind::ReconcileOnly
        );
    }

    #[test]
    fn a_row_that_disagrees_with_itself_is_never_claimed() {
        // Hand-made inconsistent records: claimable_from_ms says "claimable", the facts say no.
        let leased = claim(&admitted(&admission("w", "k", "a"), 0), "w1", 1_000, 0).unwrap();
        let mut live = leased.clone();
        live.claimable_from_ms = Some(0);
        assert_eq!(
            claim(&live, "w2", 100, 10).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        let mut finished = crate::catalog::record_result(
            &bound(0),
            1,
            &crate::catalog::scenario_tests::result_ref("r"),
            5,
        )
        .unwrap();
        finished.claimable_from_ms = Some(0);
        assert_eq!(
            claim(&finished, "w2", 100, 10).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        let mut waiting = admitted(&admission("w", "k", "a"), 0);
        waiting.awaiting_decision = true;
        let c = claim(&waiting, "w2", 100, 10).unwrap();
        assert!(
            !c.attempt.as_ref().unwrap().may_execute,
            "awaiting a decision: reconcile only"
        );
        // ... and that reconcile-only attempt cannot bind a new provider operation.
        let op = crate::catalog::operation_id_for("k", "w", "a");
        assert_eq!(
            crate::catalog::bind_provider_operation(&c, c.fence, &op, 11)
                .unwrap_err()
                .kind,
            RejectionKind::ReconcileOnly
        );
    }

    #[test]
    fn bounds_are_checked() {
        let rec = admitted(&admission("w", "k", "a"), 0);
        assert_eq!(
            claim(&rec, "", 100, 0).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
        assert_eq!(
            claim(&rec, "w", 0, 0).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
        assert_eq!(
            claim(&rec, "w", MAX_LEASE_MS + 1, 0).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
        assert_eq!(
            claim(&rec, "w", 10, i64::MAX).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
    }
}
