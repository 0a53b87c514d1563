//! Compaction (retention): `compactable`, `compact`, and the refusal every transition gives a
//! compacted record.
//!
//! A settled record's attempts, provider binding, retry guard, result reference, evidence and
//! decision matter only until the later receipt observed the result. Compaction drops them and
//! keeps what stops the key from ever being admitted again and what proves how it ended:
//!
//! - kept: the key, the source receipt (run, tick, token), the input digest, `admitted_at_ms`,
//!   the fence and attempt count (an old fence stays stale), the evidence revision and the
//!   whole settlement (receipt, completion evidence digest, time);
//! - dropped: the input reference (emptied; the digest names the input), the attempt and its
//!   lease, the provider operation id (derivable from the key: `operation_id_for`), the retry
//!   guard, the result reference, digest, media type, size, attempt and time (the settlement's
//!   evidence digest binds reference and digest), the unknown-evidence reference and the operator decision; `lease_boot_id` is
//!   emptied (no lease-clock value is left).
//!
//! Rules:
//! - Only a settled record is compactable, from its settlement's wall-clock time on
//!   (`compactable_from_ms`, which storage indexes): `compact(rec, cutoff)` compacts it when
//!   that time is at or before `cutoff`. An unsettled record never is (`not_compactable`), so
//!   the lifecycle gate and every pending view keep what they see. Retention is measured on
//!   the wall clock because it is for people: no lease, fence or admission depends on it.
//! - Compacting a compacted record is a no-op.
//! - A compacted record admits nothing new: the same input digest from the same receipt or a
//!   later tick of its source run is a no-op (see `admit`; its reference is no longer
//!   compared), anything else is an `admission_conflict`. Settling it again with the exact
//!   recorded settlement is a no-op, any other settlement a `settlement_conflict`. Every other
//!   transition is refused as `compacted`.

use super::admission::check_now;
use super::record::{ActivityRecord, Now};
use super::rejection::{Rejection, RejectionKind};

/// Whether `rec` may be compacted with the wall-clock `cutoff_ms`: settled, still whole, and
/// settled at or before the cutoff.
pub fn compactable(rec: &ActivityRecord, cutoff_ms: i64) -> bool {
    rec.compactable_from_ms()
        .is_some_and(|from| from <= cutoff_ms)
}

/// The compacted form of `rec` (see the module docs), stamped with `now.wall_ms`. A compacted
/// record comes back unchanged; a record `compactable` refuses is `not_compactable`.
pub fn compact(
    rec: &ActivityRecord,
    cutoff_ms: i64,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    check_now(now)?;
    if rec.compacted() {
        return Ok(rec.clone());
    }
    let Some(settlement) = rec.settlement.as_ref() else {
        return Err(Rejection::on(
            RejectionKind::NotCompactable,
            "settlement",
            "an unsettled activity is never compacted",
        ));
    };
    if !compactable(rec, cutoff_ms) {
        return Err(Rejection::on(
            RejectionKind::NotCompactable,
            "settled_at_ms",
            format!(
                "settled at {}, after the cutoff {cutoff_ms}",
                settlement.settled_at_ms
            ),
        ));
    }
    let mut next = rec.clone();
    next.version += 1;
    next.compacted_result_failed = rec.result.as_ref().is_some_and(|r| r.result.failed);
    next.admission.input_ref.clear();
    next.attempt = None;
    next.binding = None;
    next.retry_guard = None;
    next.result = None;
    next.evidence = None;
    next.awaiting_decision = false;
    next.decision = None;
    next.claimable_from_ms = None;
    next.lease_boot_id.clear();
    next.compacted_at_ms = Some(now.wall_ms);
    Ok(next)
}

/// The refusal of every transition but `admit` and `settle` on a compacted record.
pub(crate) fn refuse_compacted(rec: &ActivityRecord) -> Result<(), Rejection> {
    match rec.compacted_at_ms {
        None => Ok(()),
        Some(at) => Err(Rejection::new(
            RejectionKind::Compacted,
            format!(
                "the activity settled and was compacted at {at}; only its key, input digest and \
                 settlement remain"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::scenario_tests::{admission, admitted, at, bound, result_ref};
    use crate::catalog::{
        admit, bind_provider_operation, claim, confirm_absent, operation_id_for, rebase,
        record_result, record_unknown, release, renew, resolve, settle, settlement_evidence_digest,
        Admitted, Decision, DecisionOutcome, Receipt, COLUMNS,
    };

    fn receipt(tick: i64, token: &str) -> Receipt {
        Receipt {
            world_id: "w".into(),
            run_id: "run-1".into(),
            tick,
            visibility_token: token.into(),
        }
    }

    fn evidence() -> String {
        settlement_evidence_digest("k", "w", "a", "r", "sha256:r")
    }

    /// Bound at 0, result at 5, settled at 9 by tick 8.
    fn settled() -> ActivityRecord {
        let rec = record_result(&bound(0), 1, &result_ref("r"), &at(5)).unwrap();
        settle(&rec, &receipt(8, "t8"), &evidence(), None, &at(9)).unwrap()
    }

    #[test]
    fn only_a_settled_record_at_or_before_the_cutoff_is_compacted() {
        let unsettled = [
            admitted(&admission("w", "k", "a"), 0),
            bound(0),
            record_result(&bound(0), 1, &result_ref("r"), &at(5)).unwrap(),
        ];
        for rec in &unsettled {
            assert!(!compactable(rec, i64::MAX));
            let err = compact(rec, i64::MAX, &at(100)).unwrap_err();
            assert_eq!(err.kind, RejectionKind::NotCompactable);
            assert_eq!(err.field, Some("settlement"));
        }
        let rec = settled();
        assert_eq!(rec.compactable_from_ms(), Some(9));
        assert!(!compactable(&rec, 8));
        assert_eq!(
            compact(&rec, 8, &at(100)).unwrap_err().field,
            Some("settled_at_ms")
        );
        assert!(compactable(&rec, 9));
        let done = compact(&rec, 9, &at(100)).unwrap();
        assert_eq!(done.compacted_at_ms, Some(100));
        assert_eq!(done.version, rec.version + 1);
        assert_eq!(done.compactable_from_ms(), None);
        assert!(!done.unsettled() && !done.pending_observation());
        // Compacting again is a no-op.
        assert_eq!(compact(&done, i64::MAX, &at(200)).unwrap(), done);
    }

    #[test]
    fn compaction_keeps_the_key_input_digest_fence_and_settlement_and_drops_the_rest() {
        let rec = settled();
        let done = compact(&rec, 9, &at(100)).unwrap();
        assert_eq!(done.admission.key, rec.admission.key);
        assert_eq!(done.admission.source, rec.admission.source);
        assert_eq!(done.admission.input_digest, rec.admission.input_digest);
        assert_eq!(done.admission.input_ref, "");
        assert_eq!(done.settlement, rec.settlement);
        assert_eq!(
            (done.fence, done.attempt_count, done.admitted_at_ms),
            (rec.fence, rec.attempt_count, rec.admitted_at_ms)
        );
        assert!(done.binding.is_none() && done.result.is_none() && done.attempt.is_none());
        assert!(done.retry_guard.is_none() && done.evidence.is_none() && done.decision.is_none());
        assert_eq!(done.lease_boot_id, "");
        assert!(!done.compacted_result_failed);
        // How it ended stays: a failed result's flag survives, in its row too.
        let mut failed = result_ref("r");
        failed.failed = true;
        let rec_failed = record_result(&bound(0), 1, &failed, &at(5)).unwrap();
        let rec_failed = settle(&rec_failed, &receipt(8, "t8"), &evidence(), None, &at(9)).unwrap();
        let done_failed = compact(&rec_failed, 9, &at(100)).unwrap();
        assert!(done_failed.compacted_result_failed);
        assert_eq!(
            ActivityRecord::from_cells(&done_failed.to_cells()).unwrap(),
            done_failed
        );
        // It round-trips through the row layout, and a row that claims compaction but keeps a
        // dropped fact is refused.
        assert_eq!(ActivityRecord::from_cells(&done.to_cells()).unwrap(), done);
        let at_col = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
        let mut bad = done.to_cells();
        bad[at_col("input_ref")] = crate::catalog::Cell::Text("input://1".into());
        assert_eq!(
            ActivityRecord::from_cells(&bad).unwrap_err().column,
            Some("compacted_at_ms")
        );
        let mut no_flag = done.to_cells();
        no_flag[at_col("result_failed")] = crate::catalog::Cell::Null;
        assert_eq!(
            ActivityRecord::from_cells(&no_flag).unwrap_err().column,
            Some("result_ref")
        );
        let mut whole_but_marked = rec.to_cells();
        whole_but_marked[at_col("compacted_at_ms")] = crate::catalog::Cell::Int(1);
        assert!(ActivityRecord::from_cells(&whole_but_marked).is_err());
        let mut wrong_derived = rec.to_cells();
        wrong_derived[at_col("compactable_from_ms")] = crate::catalog::Cell::Null;
        assert_eq!(
            ActivityRecord::from_cells(&wrong_derived)
                .unwrap_err()
                .column,
            Some("compactable_from_ms")
        );
    }

    #[test]
    fn a_compacted_key_is_never_admitted_again() {
        let done = compact(&settled(), 9, &at(100)).unwrap();
        let adm = admission("w", "k", "a");
        // The same input digest, from the source receipt or a later tick: a no-op.
        assert_eq!(
            admit(Some(&done), &adm, &at(200)).unwrap(),
            (done.clone(), Admitted::Replay)
        );
        let mut later = adm.clone();
        later.source.tick = 40;
        later.source.visibility_token = "tok-40".into();
        assert_eq!(
            admit(Some(&done), &later, &at(200)).unwrap(),
            (done.clone(), Admitted::Rerequest)
        );
        // The reference is gone and no longer compared: the digest names the input.
        let mut moved = later.clone();
        moved.input_ref = "inline:e30=".into();
        assert_eq!(admit(Some(&done), &moved, &at(200)).unwrap().0, done);
        // Another input under the key, or another run, is a conflict.
        let mut other = later.clone();
        other.input_digest = "sha256:other".into();
        let err = admit(Some(&done), &other, &at(200)).unwrap_err();
        assert_eq!(
            (err.kind, err.field),
            (RejectionKind::AdmissionConflict, Some("input_digest"))
        );
        let mut other_run = later.clone();
        other_run.source.run_id = "run-2".into();
        assert_eq!(
            admit(Some(&done), &other_run, &at(200)).unwrap_err().kind,
            RejectionKind::AdmissionConflict
        );
    }

    #[test]
    fn the_settlement_survives_and_only_its_exact_repeat_is_accepted() {
        let rec = settled();
        let done = compact(&rec, 9, &at(100)).unwrap();
        assert_eq!(
            settle(&done, &receipt(8, "t8"), &evidence(), None, &at(300)).unwrap(),
            done
        );
        assert_eq!(
            settle(
                &done,
                &receipt(8, "t8"),
                &evidence(),
                Some(done.fence),
                &at(300)
            )
            .unwrap(),
            done
        );
        let kind = |r: Result<ActivityRecord, Rejection>| r.unwrap_err().kind;
        assert_eq!(
            kind(settle(
                &done,
                &receipt(9, "t9"),
                &evidence(),
                None,
                &at(300)
            )),
            RejectionKind::SettlementConflict
        );
        assert_eq!(
            kind(settle(
                &done,
                &receipt(8, "t8"),
                "sha256:other",
                None,
                &at(300)
            )),
            RejectionKind::SettlementConflict
        );
        assert_eq!(
            kind(settle(
                &done,
                &receipt(8, "t8"),
                &evidence(),
                Some(0),
                &at(300)
            )),
            RejectionKind::StaleFence
        );
        assert_eq!(
            kind(settle(&done, &receipt(8, ""), &evidence(), None, &at(300))),
            RejectionKind::TokenlessReceipt
        );
    }

    #[test]
    fn every_other_transition_refuses_a_compacted_record() {
        let done = compact(&settled(), 9, &at(100)).unwrap();
        let t = at(1_000);
        let f = done.fence;
        let op = operation_id_for("k", "w", "a");
        let abandon = Decision {
            outcome: DecisionOutcome::Abandon,
            evidence_revision: done.evidence_revision,
            operator: "op".into(),
            note: String::new(),
        };
        let refused = [
            claim(&done, "w9", 100, &t),
            renew(&done, f, 100, &t),
            release(&done, f, &t),
            bind_provider_operation(&done, f, &op, &t),
            record_result(&done, f, &result_ref("r"), &t),
            confirm_absent(&done, f, "guard://g", "sha256:g", &t),
            record_unknown(&done, f, "ev://e", "sha256:e", 0, &t),
            resolve(&done, &abandon, &t),
        ];
        for out in refused {
            assert_eq!(out.unwrap_err().kind, RejectionKind::Compacted);
        }
        // A compacted record holds no lease-clock value: another boot's rebase keeps it.
        let other_boot = Now::at("boot-2", 5);
        assert_eq!(rebase(&done, &other_boot).unwrap(), done);
    }
}
