//! `record_result`: the bounded result reference, recorded once under the live fence.

use super::attempt::live;
use super::bounds;
use super::record::{ActivityRecord, Now, ResultRecord, ResultRef};
use super::rejection::{Rejection, RejectionKind};

pub(crate) fn check_result(result: &ResultRef) -> Result<(), Rejection> {
    bounds::reference("result.ref", &result.result_ref)?;
    bounds::digest("result.digest", &result.digest)?;
    bounds::kind("result.media_type", &result.media_type)?;
    bounds::non_negative("result.size", result.size)
}

/// Records the result under the live fence. An execute attempt must have bound its provider
/// operation first; a reconcile attempt records what it recovered. Repeating the exact result
/// under the same fence is a no-op; any other result once one exists is a conflict.
pub fn record_result(
    rec: &ActivityRecord,
    fence: i64,
    result: &ResultRef,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    check_result(result)?;
    if let Some(existing) = rec.result.as_ref() {
        if existing.result == *result && existing.fence == fence {
            return Ok(rec.clone());
        }
        if fence != rec.fence {
            return Err(Rejection::on(
                RejectionKind::StaleFence,
                "fence",
                format!("fence {fence} is not the current fence {}", rec.fence),
            ));
        }
        return Err(Rejection::new(
            RejectionKind::ResultConflict,
            format!(
                "a different result ({}) is already recorded",
                existing.result.result_ref
            ),
        ));
    }
    let attempt = live(rec, fence, now)?;
    if attempt.may_execute && rec.binding.is_none() {
        return Err(Rejection::new(
            RejectionKind::NotBound,
            "bind the provider operation before executing and recording a result",
        ));
    }
    let number = attempt.number;
    let mut next = rec.next(now);
    next.result = Some(ResultRecord {
        result: result.clone(),
        attempt: number,
        fence,
        recorded_at_ms: now.wall_ms,
    });
    next.attempt = None;
    next.awaiting_decision = false;
    next.claimable_from_ms = None;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::attempt::claim;
    use crate::catalog::scenario_tests::{admission, admitted, at, bound, result_ref};

    #[test]
    fn execute_attempts_must_bind_first() {
        let rec = claim(&admitted(&admission("w", "k", "a"), 0), "w1", 100, &at(0)).unwrap();
        assert_eq!(
            record_result(&rec, 1, &result_ref("r"), &at(1))
                .unwrap_err()
                .kind,
            RejectionKind::NotBound
        );
    }

    #[test]
    fn exact_duplicate_is_a_no_op_and_a_different_result_conflicts() {
        let rec = record_result(&bound(0), 1, &result_ref("r"), &at(5)).unwrap();
        assert_eq!(rec.claimable_from_ms, None);
        assert!(rec.attempt.is_none());
        assert_eq!(
            record_result(&rec, 1, &result_ref("r"), &at(6)).unwrap(),
            rec
        );
        assert_eq!(
            record_result(&rec, 1, &result_ref("other"), &at(6))
                .unwrap_err()
                .kind,
            RejectionKind::ResultConflict
        );
        assert_eq!(
            record_result(&rec, 0, &result_ref("other"), &at(6))
                .unwrap_err()
                .kind,
            RejectionKind::StaleFence
        );
    }

    #[test]
    fn a_stale_or_expired_fence_records_nothing() {
        let rec = bound(0);
        assert_eq!(
            record_result(&rec, 0, &result_ref("r"), &at(1))
                .unwrap_err()
                .kind,
            RejectionKind::StaleFence
        );
        assert_eq!(
            record_result(&rec, 1, &result_ref("r"), &at(100))
                .unwrap_err()
                .kind,
            RejectionKind::LeaseExpired
        );
        let newer = claim(&rec, "w2", 100, &at(100)).unwrap();
        assert_eq!(
            record_result(&newer, 1, &result_ref("r"), &at(101))
                .unwrap_err()
                .kind,
            RejectionKind::StaleFence
        );
        assert!(
            record_result(&newer, 2, &result_ref("r"), &at(101)).is_ok(),
            "reconcile records"
        );
    }
}
