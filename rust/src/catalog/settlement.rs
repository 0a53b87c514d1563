//! `settle`: bind the recorded result to the later committed receipt that observed it.

use super::admission::check_now;
use super::admission::check_receipt;
use super::bounds;
use super::identity::settlement_evidence_digest;
use super::record::{ActivityRecord, Now, Receipt, SettlementRecord};
use super::rejection::{Rejection, RejectionKind};

/// Settles the activity against `receipt`, a later committed tick of the same world and run whose
/// completion evidence digest binds this activity's kind and id to the recorded result reference
/// and digest (see `settlement_evidence_digest`). With `fence`, a caller also proves it still
/// holds the current fence. An exact duplicate is a no-op; a different settlement conflicts
/// (also on a compacted record, which keeps its settlement but not its result).
pub fn settle(
    rec: &ActivityRecord,
    receipt: &Receipt,
    evidence_digest: &str,
    fence: Option<i64>,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    check_now(now)?;
    check_receipt(receipt)?;
    bounds::digest("evidence_digest", evidence_digest)?;
    if let Some(fence) = fence {
        if fence != rec.fence {
            return Err(Rejection::on(
                RejectionKind::StaleFence,
                "fence",
                format!("fence {fence} is not the current fence {}", rec.fence),
            ));
        }
    }
    if rec.compacted() {
        // The result reference is gone; the recorded settlement still binds it.
        return match rec.settlement.as_ref() {
            Some(s) if same_settlement(s, receipt, evidence_digest) => Ok(rec.clone()),
            _ => Err(Rejection::new(
                RejectionKind::SettlementConflict,
                "the activity was settled by another receipt and compacted",
            )),
        };
    }
    let Some(result) = rec.result.as_ref() else {
        return Err(Rejection::new(
            RejectionKind::NoResult,
            "no result is recorded; nothing can be observed yet",
        ));
    };
    let key = rec.key();
    let source = &rec.admission.source;
    if receipt.world_id != key.world_id || receipt.run_id != source.run_id {
        return Err(Rejection::on(
            RejectionKind::ReceiptMismatch,
            "receipt",
            format!(
                "receipt is for world {:?} run {:?}; the activity was admitted in world {:?} run {:?}",
                receipt.world_id, receipt.run_id, key.world_id, source.run_id
            ),
        ));
    }
    if receipt.tick <= source.tick {
        return Err(Rejection::on(
            RejectionKind::ReceiptMismatch,
            "receipt.tick",
            format!(
                "tick {} is not later than the source tick {}",
                receipt.tick, source.tick
            ),
        ));
    }
    let expected = settlement_evidence_digest(
        &key.kind,
        &key.world_id,
        &key.activity_id,
        &result.result.result_ref,
        &result.result.digest,
    );
    if evidence_digest != expected {
        return Err(Rejection::on(
            RejectionKind::EvidenceMismatch,
            "evidence_digest",
            "the completion evidence does not bind this activity's recorded result",
        ));
    }
    if let Some(s) = rec.settlement.as_ref() {
        if same_settlement(s, receipt, evidence_digest) {
            return Ok(rec.clone());
        }
        return Err(Rejection::new(
            RejectionKind::SettlementConflict,
            format!(
                "already settled by tick {} ({})",
                s.tick, s.visibility_token
            ),
        ));
    }
    let mut next = rec.next(now);
    next.settlement = Some(SettlementRecord {
        run_id: receipt.run_id.clone(),
        tick: receipt.tick,
        visibility_token: receipt.visibility_token.clone(),
        evidence_digest: evidence_digest.to_owned(),
        settled_at_ms: now.wall_ms,
    });
    Ok(next)
}

fn same_settlement(s: &SettlementRecord, receipt: &Receipt, evidence_digest: &str) -> bool {
    s.run_id == receipt.run_id
        && s.tick == receipt.tick
        && s.visibility_token == receipt.visibility_token
        && s.evidence_digest == evidence_digest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::result::record_result;
    use crate::catalog::scenario_tests::{at, bound, result_ref};

    fn receipt(tick: i64, token: &str) -> Receipt {
        Receipt {
            world_id: "w".into(),
            run_id: "run-1".into(),
            tick,
            visibility_token: token.into(),
        }
    }

    fn done() -> (ActivityRecord, String) {
        let rec = record_result(&bound(0), 1, &result_ref("r"), &at(5)).unwrap();
        let d = settlement_evidence_digest("k", "w", "a", "r", "sha256:r");
        (rec, d)
    }

    #[test]
    fn settles_once_against_a_later_receipt() {
        let (rec, d) = done();
        let settled = settle(&rec, &receipt(8, "t8"), &d, None, &at(9)).unwrap();
        assert_eq!(
            settle(&settled, &receipt(8, "t8"), &d, None, &at(10)).unwrap(),
            settled
        );
        assert_eq!(
            settle(&settled, &receipt(9, "t9"), &d, None, &at(10))
                .unwrap_err()
                .kind,
            RejectionKind::SettlementConflict
        );
    }

    #[test]
    fn wrong_receipts_evidence_and_fences_are_refused() {
        let (rec, d) = done();
        let kind = |r: Result<ActivityRecord, Rejection>| r.unwrap_err().kind;
        assert_eq!(
            kind(settle(&rec, &receipt(3, "t"), &d, None, &at(9))),
            RejectionKind::ReceiptMismatch
        );
        assert_eq!(
            kind(settle(&rec, &receipt(8, ""), &d, None, &at(9))),
            RejectionKind::TokenlessReceipt
        );
        let mut other_run = receipt(8, "t");
        other_run.run_id = "run-2".into();
        assert_eq!(
            kind(settle(&rec, &other_run, &d, None, &at(9))),
            RejectionKind::ReceiptMismatch
        );
        assert_eq!(
            kind(settle(&rec, &receipt(8, "t"), "sha256:nope", None, &at(9))),
            RejectionKind::EvidenceMismatch
        );
        assert_eq!(
            kind(settle(&rec, &receipt(8, "t"), &d, Some(0), &at(9))),
            RejectionKind::StaleFence
        );
        assert!(settle(&rec, &receipt(8, "t"), &d, Some(1), &at(9)).is_ok());
        assert_eq!(
            kind(settle(&bound(0), &receipt(8, "t"), &d, None, &at(9))),
            RejectionKind::NoResult
        );
    }
}
