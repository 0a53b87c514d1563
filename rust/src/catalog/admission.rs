//! `admit`: the required projector's idempotent admission of one logical activity.

use super::bounds;
use super::record::{ActivityRecord, Admission, Now, Receipt};
use super::rejection::{Rejection, RejectionKind};

/// Validates a clock reading: a lease clock must name its boot.
pub(crate) fn check_now(now: &Now) -> Result<(), Rejection> {
    bounds::id("now.boot_id", &now.boot_id)
}

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

/// How `admit` treated a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// No record existed: a new one is admitted.
    New,
    /// The identical admission again (same source receipt and input): a no-op.
    Replay,
    /// The same request (key and input) from a later tick of the source run: it is the same
    /// Activity, so this is a no-op and the source binding stays the first receipt's. A
    /// projection may therefore ask, in every tick, for every intent not yet observed.
    Rerequest,
}

/// Admits `admission`. With an `existing` record for the same key, the identical admission is
/// a replay and the same input from a later tick of the same run is a re-request; both return
/// the existing record unchanged. Any other difference (input, run, or a tick that is not later
/// with another token) is an `admission_conflict`. A compacted record (see `compaction`) is
/// never admitted afresh: the same rules hold with the input digest alone naming the input.
pub fn admit(
    existing: Option<&ActivityRecord>,
    admission: &Admission,
    now: &Now,
) -> Result<(ActivityRecord, Admitted), Rejection> {
    check_now(now)?;
    check(admission)?;
    let Some(rec) = existing else {
        return Ok((new_record(admission, now), Admitted::New));
    };
    let old = &rec.admission;
    let conflict = |field: &'static str, why: &str| {
        Err(Rejection::on(
            RejectionKind::AdmissionConflict,
            field,
            format!("the activity was admitted with {why}"),
        ))
    };
    if old.key != admission.key {
        return conflict("key", "another key");
    }
    // A compacted record dropped its input reference; its digest still names the input.
    if !rec.compacted() && old.input_ref != admission.input_ref {
        return conflict("input_ref", "a different immutable input reference");
    }
    if old.input_digest != admission.input_digest {
        return conflict("input_digest", "a different immutable input digest");
    }
    if old.source == admission.source {
        return Ok((rec.clone(), Admitted::Replay));
    }
    if old.source.run_id != admission.source.run_id {
        return conflict("source.run_id", "a source receipt of another run");
    }
    if admission.source.tick > old.source.tick {
        return Ok((rec.clone(), Admitted::Rerequest));
    }
    if old.source.tick == admission.source.tick {
        return conflict(
            "source.visibility_token",
            "another visibility token at the same source tick",
        );
    }
    conflict("source.tick", "a source tick later than this request's")
}

fn new_record(admission: &Admission, now: &Now) -> ActivityRecord {
    ActivityRecord {
        admission: admission.clone(),
        admitted_at_ms: now.wall_ms,
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
        claimable_from_ms: Some(now.boot_ms),
        lease_boot_id: now.boot_id.clone(),
        version: 1,
        compacted_at_ms: None,
        compacted_result_failed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::scenario_tests::{admission, at};

    #[test]
    fn identical_replay_and_later_rerequest_are_no_ops_and_any_other_difference_conflicts() {
        let adm = admission("w", "k", "a");
        let (rec, how) = admit(None, &adm, &at(10)).unwrap();
        assert_eq!(how, Admitted::New);
        assert_eq!(rec.claimable_from_ms, Some(10));
        assert_eq!(
            admit(Some(&rec), &adm, &at(99)).unwrap(),
            (rec.clone(), Admitted::Replay)
        );
        // The same request from a later tick of the run is the same Activity: source stays.
        let mut later = adm.clone();
        later.source.tick += 3;
        later.source.visibility_token = "tok-8".into();
        assert_eq!(
            admit(Some(&rec), &later, &at(99)).unwrap(),
            (rec.clone(), Admitted::Rerequest)
        );
        let refused = |other: &Admission| {
            let err = admit(Some(&rec), other, &at(99)).unwrap_err();
            assert_eq!(err.kind, RejectionKind::AdmissionConflict);
            err.field.unwrap()
        };
        let mut other = later.clone();
        other.input_digest = "sha256:other".into();
        assert_eq!(refused(&other), "input_digest");
        let mut other = later.clone();
        other.input_ref = "input://2".into();
        assert_eq!(refused(&other), "input_ref");
        let mut other = later.clone();
        other.source.run_id = "run-2".into();
        assert_eq!(refused(&other), "source.run_id");
        let mut other = adm.clone();
        other.source.visibility_token = "tok-sibling".into();
        assert_eq!(refused(&other), "source.visibility_token");
        let mut other = adm.clone();
        other.source.tick -= 1;
        assert_eq!(refused(&other), "source.tick");
    }

    #[test]
    fn tokenless_and_foreign_receipts_are_refused() {
        let mut adm = admission("w", "k", "a");
        adm.source.visibility_token.clear();
        assert_eq!(
            admit(None, &adm, &at(0)).unwrap_err().kind,
            RejectionKind::TokenlessReceipt
        );
        let mut adm = admission("w", "k", "a");
        adm.source.world_id = "w2".into();
        assert_eq!(
            admit(None, &adm, &at(0)).unwrap_err().kind,
            RejectionKind::ReceiptMismatch
        );
        let mut adm = admission("w", "k", "a");
        adm.key.kind = "k".repeat(256);
        assert_eq!(
            admit(None, &adm, &at(0)).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
    }
}
