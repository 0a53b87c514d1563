//! `admit`: the required projector's idempotent admission of one logical activity.

use super::bounds;
use super::record::{ActivityRecord, Admission, Receipt};
use super::rejection::{Rejection, RejectionKind};

/// Validates a receipt that admits or settles work: bounded ids and a visibility token.
pub(crate) fn check_receipt(receipt: &Receipt) -> Result<(), Rejection> {
    bounds::id("receipt.world_id", &receipt.world_id)?;
    bounds::id("receipt.run_id", &receipt.run_id)?;
    bounds::non_negative("receipt.tick", receipt.tick)?;
    if receipt.visibility_token.is_empty() {
        return Err(Rejection::on(
            RejectionKind::TokenlessReceipt,
            "receipt.visibility_token",
            "a receipt without a visibility token names no pinned snapshot",
        ));
    }
    bounds::id("receipt.visibility_token", &receipt.visibility_token)
}

fn check(admission: &Admission) -> Result<(), Rejection> {
    let key = &admission.key;
    bounds::id("world_id", &key.world_id)?;
    bounds::kind("kind", &key.kind)?;
    bounds::id("activity_id", &key.activity_id)?;
    check_receipt(&admission.source)?;
    if admission.source.world_id != key.world_id {
        return Err(Rejection::on(
            RejectionKind::ReceiptMismatch,
            "source.world_id",
            format!(
                "source receipt is from world {:?}, the activity belongs to {:?}",
                admission.source.world_id, key.world_id
            ),
        ));
    }
    bounds::reference("input_ref", &admission.input_ref)?;
    bounds::digest("input_digest", &admission.input_digest)
}

/// Admits `admission`. With an `existing` record for the same key, an identical admission is a
/// no-op (the existing record comes back unchanged) and any difference is a conflict.
pub fn admit(
    existing: Option<&ActivityRecord>,
    admission: &Admission,
    now_ms: i64,
) -> Result<ActivityRecord, Rejection> {
    check(admission)?;
    if let Some(rec) = existing {
        let old = &rec.admission;
        let differs = [
            ("key", old.key != admission.key),
            (
                "source.run_id",
                old.source.run_id != admission.source.run_id,
            ),
            ("source.tick", old.source.tick != admission.source.tick),
            (
                "source.visibility_token",
                old.source.visibility_token != admission.source.visibility_token,
            ),
            ("input_ref", old.input_ref != admission.input_ref),
            ("input_digest", old.input_digest != admission.input_digest),
        ];
        return match differs.iter().find(|(_, d)| *d) {
            None => Ok(rec.clone()),
            Some((field, _)) => Err(Rejection::on(
                RejectionKind::AdmissionConflict,
                field,
                "the activity was admitted with a different immutable value",
            )),
        };
    }
    Ok(ActivityRecord {
        admission: admission.clone(),
        admitted_at_ms: now_ms,
        fence: 0,
        attempt_count: 0,
        attempt: None,
        binding: None,
        retry_guard: None,
        result: None,
        evidence: None,
        evidence_revision: 0,
        awaiting_decision: false,
        decision: None,
        settlement: None,
        claimable_from_ms: Some(now_ms),
        version: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::scenario_tests::admission;

    #[test]
    fn identical_replay_is_a_no_op_and_any_difference_conflicts() {
        let adm = admission("w", "k", "a");
        let rec = admit(None, &adm, 10).unwrap();
        assert_eq!(rec.claimable_from_ms, Some(10));
        assert_eq!(admit(Some(&rec), &adm, 99).unwrap(), rec);
        let mut other = adm.clone();
        other.input_digest = "sha256:other".into();
        let err = admit(Some(&rec), &other, 99).unwrap_err();
        assert_eq!(err.kind, RejectionKind::AdmissionConflict);
        assert_eq!(err.field, Some("input_digest"));
        let mut other = adm.clone();
        other.source.tick += 1;
        assert_eq!(
            admit(Some(&rec), &other, 99).unwrap_err().kind,
            RejectionKind::AdmissionConflict
        );
    }

    #[test]
    fn tokenless_and_foreign_receipts_are_refused() {
        let mut adm = admission("w", "k", "a");
        adm.source.visibility_token.clear();
        assert_eq!(
            admit(None, &adm, 0).unwrap_err().kind,
            RejectionKind::TokenlessReceipt
        );
        let mut adm = admission("w", "k", "a");
        adm.source.world_id = "w2".into();
        assert_eq!(
            admit(None, &adm, 0).unwrap_err().kind,
            RejectionKind::ReceiptMismatch
        );
        let mut adm = admission("w", "k", "a");
        adm.key.kind = "k".repeat(256);
        assert_eq!(
            admit(None, &adm, 0).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
    }
}
