//! `admit`: the required projector's idempotent admission of one logical activity, and
//! `admit_refused`: the admission of one its family refused before any work (a request that
//! can never run), already holding its failed result.

use super::bounds;
use super::decision::ABANDONED_MEDIA_TYPE;
use super::record::{ActivityRecord, Admission, Now, Receipt, ResultRecord, ResultRef};
use super::rejection::{Rejection, RejectionKind};
use super::result::check_result;

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
    bounds::digest("input_digest", &admission.input_digest)?;
    bounds::optional_id("bound_host", &admission.bound_host)
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
    if old.bound_host != admission.bound_host {
        return conflict("bound_host", "another bound host");
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

/// Validates a refusal: a bounded result reference that is a failed result and not an
/// operator's abandon (whose reference names a decision, not a durable document).
fn check_refusal(refusal: &ResultRef) -> Result<(), Rejection> {
    check_result(refusal)?;
    if !refusal.failed {
        return Err(Rejection::on(
            RejectionKind::InvalidRefusal,
            "refusal.failed",
            "a refusal is a failed result",
        ));
    }
    if refusal.media_type == ABANDONED_MEDIA_TYPE {
        return Err(Rejection::on(
            RejectionKind::InvalidRefusal,
            "refusal.media_type",
            "a refusal is a durable refusal document, not an operator's abandon",
        ));
    }
    Ok(())
}

/// Admits `admission` refused: its family's admission check found that the request can never
/// run, and `refusal` references the durable refusal document (made durable first), a failed
/// result.
///
/// Without an `existing` record, the new record already holds `refusal` as its result
/// (attempt 0, fence 0): it never had an attempt and is never claimable, so no provider
/// operation is ever bound; it is pending observation, and the family observes and settles
/// it through a later tick like any other failed result.
///
/// With an `existing` record the rules are `admit`'s: a different input or source under the
/// key is an `admission_conflict`, and the identical admission or a later re-request is a
/// no-op that returns the stored record unchanged, whatever it holds. The first admission
/// decides: an Activity admitted normally before (say, under a larger cap) stays claimable,
/// and a refused one keeps its first refusal even if a replay computes another (say, under
/// another cap), so a replay never rewrites a recorded result.
pub fn admit_refused(
    existing: Option<&ActivityRecord>,
    admission: &Admission,
    refusal: &ResultRef,
    now: &Now,
) -> Result<(ActivityRecord, Admitted), Rejection> {
    check_now(now)?;
    check(admission)?;
    check_refusal(refusal)?;
    match existing {
        None => Ok((refused_record(admission, refusal, now), Admitted::New)),
        Some(_) => admit(existing, admission, now),
    }
}

/// Which clock reading a stamped column of a new record takes (see `ADMISSION_STAMPS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// `Now::boot_id`.
    BootId,
    /// `Now::boot_ms`.
    BootMs,
    /// `Now::wall_ms`.
    WallMs,
}

/// The columns of a newly admitted record that hold the admitting transaction's clock
/// reading, and which part of it each holds: the rest of the record is the admission alone.
/// Storage that reads its clock inside the very statement that writes the record (a
/// PostgreSQL server clock) takes `admission_template` and puts that statement's reading
/// into these columns, so an admission is one round trip; `admit(None, ..)` is the same
/// record stamped by the caller (`stamped_template_is_admit` checks it).
pub const ADMISSION_STAMPS: [(&str, Stamp); 3] = [
    ("admitted_at_ms", Stamp::WallMs),
    ("claimable_from_ms", Stamp::BootMs),
    ("lease_boot_id", Stamp::BootId),
];

/// The record `admit` makes of `admission` when no record exists, with every column of
/// `ADMISSION_STAMPS` left for the admitting transaction's reading (zero, empty until then).
/// An admission over an existing record never writes (`admit` returns that record or a
/// conflict), so storage may insert the template where no record exists and decide the
/// others on the records it finds.
pub fn admission_template(admission: &Admission) -> Result<ActivityRecord, Rejection> {
    check(admission)?;
    let unread = Now {
        boot_id: String::new(),
        boot_ms: 0,
        wall_ms: 0,
    };
    Ok(new_record(admission, &unread))
}

fn refused_record(admission: &Admission, refusal: &ResultRef, now: &Now) -> ActivityRecord {
    let mut rec = new_record(admission, now);
    rec.result = Some(ResultRecord {
        result: refusal.clone(),
        attempt: 0,
        fence: 0,
        recorded_at_ms: now.wall_ms,
    });
    rec.claimable_from_ms = None;
    rec
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
    use crate::catalog::record::Cell;
    use crate::catalog::scenario_tests::{admission, at, result_ref};
    use crate::catalog::{
        bind_provider_operation, claim, compact, operation_id_for, record_result, settle,
        settlement_evidence_digest,
    };

    #[test]
    fn stamped_template_is_admit() {
        let adm = admission("w", "k", "a");
        let now = Now {
            boot_id: "boot-7".into(),
            boot_ms: 1234,
            wall_ms: 1_700_000_000_000,
        };
        let mut stamped = admission_template(&adm).unwrap().to_cells();
        let columns = crate::catalog::record::COLUMNS;
        for (name, stamp) in ADMISSION_STAMPS {
            let at = columns.iter().position(|c| *c == name).unwrap();
            stamped[at] = match stamp {
                Stamp::BootId => Cell::Text(now.boot_id.clone()),
                Stamp::BootMs => Cell::Int(now.boot_ms),
                Stamp::WallMs => Cell::Int(now.wall_ms),
            };
        }
        let (rec, _) = admit(None, &adm, &now).unwrap();
        assert_eq!(stamped, rec.to_cells());
        // Every other column is the admission's alone: two readings differ only there.
        let (other, _) = admit(None, &adm, &at(99)).unwrap();
        let differ: Vec<&str> = rec
            .to_cells()
            .iter()
            .zip(other.to_cells())
            .zip(columns)
            .filter(|((a, b), _)| *a != b)
            .map(|(_, c)| *c)
            .collect();
        let stamps: Vec<&str> = ADMISSION_STAMPS.iter().map(|(c, _)| *c).collect();
        assert!(differ.iter().all(|c| stamps.contains(c)), "{differ:?}");
        // The template refuses what admit refuses.
        let mut bad = adm.clone();
        bad.source.world_id = "elsewhere".into();
        assert_eq!(
            admission_template(&bad).unwrap_err().kind,
            RejectionKind::ReceiptMismatch
        );
    }

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

    fn refusal(name: &str) -> ResultRef {
        ResultRef {
            result_ref: format!("inline:{name}"),
            digest: format!("sha256:{name}"),
            media_type: "application/vnd.tether.refusal+json".into(),
            size: 42,
            failed: true,
        }
    }

    #[test]
    fn a_refused_admission_holds_its_failed_result_and_is_never_claimed_or_bound() {
        let adm = admission("w", "k", "a");
        let (rec, how) = admit_refused(None, &adm, &refusal("r"), &at(10)).unwrap();
        assert_eq!(how, Admitted::New);
        assert!(rec.refused_at_admission());
        let result = rec.result.as_ref().unwrap();
        assert_eq!(
            (result.attempt, result.fence, result.recorded_at_ms),
            (0, 0, 10)
        );
        assert_eq!(result.result, refusal("r"));
        assert_eq!((rec.fence, rec.attempt_count), (0, 0));
        assert!(rec.attempt.is_none() && rec.binding.is_none());
        assert_eq!(rec.claimable_from_ms, None);
        assert!(rec.pending_observation() && rec.unsettled());
        assert_eq!(ActivityRecord::from_cells(&rec.to_cells()).unwrap(), rec);
        // No worker can ever claim it, nor bind or record anything under any fence.
        assert_eq!(
            claim(&rec, "w1", 100, &at(11)).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        for fence in 0..2 {
            let op = operation_id_for("k", "w", "a");
            assert!(bind_provider_operation(&rec, fence, &op, &at(11)).is_err());
            assert!(record_result(&rec, fence, &result_ref("x"), &at(11)).is_err());
        }
        // It settles against a later receipt bound to the refusal, like any failed result.
        let digest = settlement_evidence_digest("k", "w", "a", "inline:r", "sha256:r");
        let mut later = adm.source.clone();
        later.tick += 1;
        later.visibility_token = "tok-6".into();
        let settled = settle(&rec, &later, &digest, None, &at(12)).unwrap();
        assert!(settled.settlement.is_some() && !settled.pending_observation());
        assert!(settled.refused_at_admission());
        let compacted = compact(&settled, 12, &at(13)).unwrap();
        assert!(compacted.refused_at_admission() && compacted.compacted_result_failed);
    }

    #[test]
    fn a_refused_admission_replays_like_admit_and_never_rewrites_a_record() {
        let adm = admission("w", "k", "a");
        let (rec, _) = admit_refused(None, &adm, &refusal("r"), &at(10)).unwrap();
        // The identical refused admission, and a re-request from a later tick: no-ops.
        assert_eq!(
            admit_refused(Some(&rec), &adm, &refusal("r"), &at(20)).unwrap(),
            (rec.clone(), Admitted::Replay)
        );
        let mut later = adm.clone();
        later.source.tick += 2;
        later.source.visibility_token = "tok-7".into();
        assert_eq!(
            admit_refused(Some(&rec), &later, &refusal("r"), &at(20)).unwrap(),
            (rec.clone(), Admitted::Rerequest)
        );
        // Another refusal of the same admission (another cap) keeps the first one; so does a
        // plain admission (the check now passes): a recorded result is never rewritten.
        assert_eq!(
            admit_refused(Some(&rec), &adm, &refusal("other"), &at(20)).unwrap(),
            (rec.clone(), Admitted::Replay)
        );
        assert_eq!(
            admit(Some(&rec), &adm, &at(20)).unwrap(),
            (rec.clone(), Admitted::Replay)
        );
        // A normally admitted Activity under the same key and input stays as it is.
        let (plain, _) = admit(None, &adm, &at(10)).unwrap();
        let (kept, how) = admit_refused(Some(&plain), &adm, &refusal("r"), &at(20)).unwrap();
        assert_eq!((kept, how), (plain.clone(), Admitted::Replay));
        // A different input under the key is a conflict, refused or not.
        let mut other = adm.clone();
        other.input_digest = "sha256:other".into();
        for existing in [&rec, &plain] {
            let err = admit_refused(Some(existing), &other, &refusal("r"), &at(20)).unwrap_err();
            assert_eq!(
                (err.kind, err.field),
                (RejectionKind::AdmissionConflict, Some("input_digest"))
            );
        }
        let mut sibling = adm.clone();
        sibling.source.visibility_token = "tok-sibling".into();
        assert_eq!(
            admit_refused(Some(&rec), &sibling, &refusal("r"), &at(20))
                .unwrap_err()
                .kind,
            RejectionKind::AdmissionConflict
        );
        // A compacted refused record is never admitted afresh either.
        let digest = settlement_evidence_digest("k", "w", "a", "inline:r", "sha256:r");
        let mut at6 = adm.source.clone();
        at6.tick = 6;
        at6.visibility_token = "tok-6".into();
        let settled = settle(&rec, &at6, &digest, None, &at(30)).unwrap();
        let compacted = compact(&settled, 30, &at(31)).unwrap();
        assert_eq!(
            admit_refused(Some(&compacted), &adm, &refusal("r"), &at(40)).unwrap(),
            (compacted.clone(), Admitted::Replay)
        );
    }

    #[test]
    fn a_refusal_must_be_a_bounded_failed_document_and_the_admission_is_checked_first() {
        let adm = admission("w", "k", "a");
        let refused = |r: ResultRef| admit_refused(None, &adm, &r, &at(0)).unwrap_err();
        let mut ok_flag = refusal("r");
        ok_flag.failed = false;
        let err = refused(ok_flag);
        assert_eq!(
            (err.kind, err.field),
            (RejectionKind::InvalidRefusal, Some("refusal.failed"))
        );
        let mut abandon = refusal("r");
        abandon.media_type = ABANDONED_MEDIA_TYPE.into();
        assert_eq!(refused(abandon).field, Some("refusal.media_type"));
        let mut empty = refusal("r");
        empty.result_ref.clear();
        assert_eq!(refused(empty).kind, RejectionKind::BoundsExceeded);
        let mut negative = refusal("r");
        negative.size = -1;
        assert_eq!(refused(negative).kind, RejectionKind::BoundsExceeded);
        // A tokenless or foreign receipt refuses a refused admission as it refuses `admit`.
        let mut tokenless = adm.clone();
        tokenless.source.visibility_token.clear();
        assert_eq!(
            admit_refused(None, &tokenless, &refusal("r"), &at(0))
                .unwrap_err()
                .kind,
            RejectionKind::TokenlessReceipt
        );
        let mut foreign = adm.clone();
        foreign.source.world_id = "w2".into();
        assert_eq!(
            admit_refused(None, &foreign, &refusal("r"), &at(0))
                .unwrap_err()
                .kind,
            RejectionKind::ReceiptMismatch
        );
        let bad_now = Now::at("", 0);
        assert_eq!(
            admit_refused(None, &adm, &refusal("r"), &bad_now)
                .unwrap_err()
                .kind,
            RejectionKind::BoundsExceeded
        );
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
