//! `resolve`: an operator's decision on an activity whose reconciliation came back unknown.
//!
//! A decision names the evidence revision it was made on and is refused if reconciliation has
//! recorded newer evidence since. It is usable once, and it raises the fence so every older
//! attempt is stale. "absent" needs a retry guard that references the adapter's proof that no
//! stale claimant can still act: an operator's word alone does not authorise a fresh execution.
//!
//! `refresh_evidence` is the one other transition of a record awaiting a decision: the adapter
//! found the device changed since the evidence the operator reviewed, so a new revision (the
//! fresh evidence document) replaces it and any decision naming the old one is refused.
//! The evidence revision is the catalog's; nothing else keeps a revision counter.

use super::admission::check_now;
use super::bounds;
use super::compaction::refuse_compacted;
use super::identity::{canonical_json, sha256_hex};
use super::record::{
    ActivityRecord, DecisionRecord, EvidenceRecord, GuardRecord, Now, ResultRecord, ResultRef,
};
use super::rejection::{Rejection, RejectionKind};
use super::result::check_result;

/// Media type of the failed result an "abandon" decision records.
pub const ABANDONED_MEDIA_TYPE: &str = "application/vnd.tether.abandoned";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecisionOutcome {
    /// The operator found the result: record it.
    Recovered(ResultRef),
    /// The operator confirms absence, backed by the adapter's retry guard.
    Absent {
        guard_ref: String,
        guard_digest: String,
    },
    /// Give up: record a failed result the family observes like any other.
    Abandon,
}

impl DecisionOutcome {
    pub fn name(&self) -> &'static str {
        match self {
            DecisionOutcome::Recovered(_) => "recovered",
            DecisionOutcome::Absent { .. } => "absent",
            DecisionOutcome::Abandon => "abandon",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub outcome: DecisionOutcome,
    pub evidence_revision: i64,
    pub operator: String,
    pub note: String,
}

fn abandoned_result(rec: &ActivityRecord, decision: &Decision, now: &Now) -> ResultRef {
    let key = rec.key();
    let revision = decision.evidence_revision.to_string();
    let at = now.wall_ms.to_string();
    let json = canonical_json(&[
        ("activity_id", &key.activity_id),
        ("decided_at_ms", &at),
        ("evidence_revision", &revision),
        ("kind", &key.kind),
        ("namespace", "tether.activity.abandoned.v1"),
        ("note", &decision.note),
        ("operator", &decision.operator),
        ("world_id", &key.world_id),
    ]);
    ResultRef {
        result_ref: format!("tether:abandoned/{revision}"),
        digest: format!("sha256:{}", sha256_hex(&json)),
        media_type: ABANDONED_MEDIA_TYPE.to_owned(),
        size: 0,
        failed: true,
    }
}

/// Records fresher evidence for an activity awaiting a decision, on the revision the caller
/// compared against (`seen_revision`): the revision rises, the record keeps awaiting a decision
/// and nothing else changes (no fence, attempt or backoff). Refused when no decision is awaited
/// (`not_awaiting_decision`) or the revision is no longer the current one
/// (`stale_evidence_revision`): then the caller compared against evidence already replaced.
pub fn refresh_evidence(
    rec: &ActivityRecord,
    seen_revision: i64,
    evidence_ref: &str,
    evidence_digest: &str,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    check_now(now)?;
    bounds::reference("evidence.ref", evidence_ref)?;
    bounds::digest("evidence.digest", evidence_digest)?;
    refuse_compacted(rec)?;
    if !rec.awaiting_decision {
        return Err(Rejection::new(
            RejectionKind::NotAwaitingDecision,
            "evidence is refreshed only while a decision is awaited",
        ));
    }
    if seen_revision != rec.evidence_revision {
        return Err(Rejection::on(
            RejectionKind::StaleEvidenceRevision,
            "evidence_revision",
            format!(
                "compared against evidence revision {seen_revision}, the current revision is {}",
                rec.evidence_revision
            ),
        ));
    }
    let mut next = rec.next(now);
    next.evidence = Some(EvidenceRecord {
        evidence_ref: evidence_ref.to_owned(),
        digest: evidence_digest.to_owned(),
        recorded_at_ms: now.wall_ms,
    });
    next.evidence_revision += 1;
    Ok(next)
}

/// Applies an operator decision to an activity awaiting one.
pub fn resolve(
    rec: &ActivityRecord,
    decision: &Decision,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    check_now(now)?;
    bounds::id("operator", &decision.operator)?;
    bounds::note(&decision.note)?;
    match &decision.outcome {
        DecisionOutcome::Recovered(result) => check_result(result)?,
        DecisionOutcome::Absent {
            guard_ref,
            guard_digest,
        } => {
            bounds::reference("guard.ref", guard_ref)?;
            bounds::digest("guard.digest", guard_digest)?;
        }
        DecisionOutcome::Abandon => {}
    }
    refuse_compacted(rec)?;
    if !rec.awaiting_decision {
        return Err(Rejection::new(
            RejectionKind::NotAwaitingDecision,
            "the activity awaits no decision (a decision is usable once)",
        ));
    }
    if decision.evidence_revision != rec.evidence_revision {
        return Err(Rejection::on(
            RejectionKind::StaleEvidenceRevision,
            "evidence_revision",
            format!(
                "decided on evidence revision {}, the current revision is {}",
                decision.evidence_revision, rec.evidence_revision
            ),
        ));
    }
    let mut next = rec.next(now);
    next.fence += 1;
    next.attempt = None;
    next.awaiting_decision = false;
    next.decision = Some(DecisionRecord {
        outcome: decision.outcome.name().to_owned(),
        evidence_revision: decision.evidence_revision,
        operator: decision.operator.clone(),
        decided_at_ms: now.wall_ms,
        note: decision.note.clone(),
    });
    let recorded = |result: ResultRef| ResultRecord {
        result,
        attempt: 0,
        fence: next.fence,
        recorded_at_ms: now.wall_ms,
    };
    match &decision.outcome {
        DecisionOutcome::Recovered(result) => {
            next.result = Some(recorded(result.clone()));
            next.claimable_from_ms = None;
        }
        DecisionOutcome::Abandon => {
            next.result = Some(recorded(abandoned_result(rec, decision, now)));
            next.claimable_from_ms = None;
        }
        DecisionOutcome::Absent {
            guard_ref,
            guard_digest,
        } => {
            next.retry_guard = Some(GuardRecord {
                guard_ref: guard_ref.clone(),
                digest: guard_digest.clone(),
                fence: next.fence,
                recorded_at_ms: now.wall_ms,
                authorizes_execution: true,
            });
            next.claimable_from_ms = Some(now.boot_ms);
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::attempt::claim;
    use crate::catalog::provider::record_unknown;
    use crate::catalog::result::record_result;
    use crate::catalog::scenario_tests::{at, bound, result_ref};

    fn unknown() -> ActivityRecord {
        let rec = claim(&bound(0), "w2", 100, &at(1000)).unwrap();
        record_unknown(&rec, 2, "ev://1", "sha256:e", 10_000, &at(1010)).unwrap()
    }

    fn decide(outcome: DecisionOutcome, revision: i64) -> Decision {
        Decision {
            outcome,
            evidence_revision: revision,
            operator: "ops@example".into(),
            note: "checked the cell".into(),
        }
    }

    #[test]
    fn stale_revision_is_refused_and_decisions_are_single_use() {
        let rec = unknown();
        let stale = decide(DecisionOutcome::Abandon, 0);
        assert_eq!(
            resolve(&rec, &stale, &at(2000)).unwrap_err().kind,
            RejectionKind::StaleEvidenceRevision
        );
        let ok = resolve(&rec, &decide(DecisionOutcome::Abandon, 1), &at(2000)).unwrap();
        let res = ok.result.as_ref().unwrap();
        assert!(res.result.failed);
        assert_eq!(res.attempt, 0);
        assert_eq!(
            resolve(&ok, &decide(DecisionOutcome::Abandon, 1), &at(2001))
                .unwrap_err()
                .kind,
            RejectionKind::NotAwaitingDecision
        );
    }

    #[test]
    fn a_decision_fences_out_older_attempts() {
        let rec = unknown();
        let reconciling = claim(&rec, "w3", 100_000, &at(20_000)).unwrap();
        assert_eq!(reconciling.fence, 3);
        let decided = resolve(
            &reconciling,
            &decide(DecisionOutcome::Recovered(result_ref("r")), 1),
            &at(20_001),
        )
        .unwrap();
        assert_eq!(decided.fence, 4);
        assert!(decided.attempt.is_none());
        assert_eq!(
            record_result(&decided, 3, &result_ref("x"), &at(20_002))
                .unwrap_err()
                .kind,
            RejectionKind::StaleFence
        );
    }

    #[test]
    fn refresh_raises_the_revision_and_the_old_one_can_no_longer_be_decided() {
        let rec = unknown();
        let fresh = refresh_evidence(&rec, 1, "ev://2", "sha256:f", &at(1500)).unwrap();
        assert_eq!(fresh.evidence_revision, 2);
        assert!(fresh.awaiting_decision);
        assert_eq!(fresh.fence, rec.fence);
        assert_eq!(fresh.claimable_from_ms, rec.claimable_from_ms);
        assert_eq!(fresh.evidence.as_ref().unwrap().evidence_ref, "ev://2");
        assert_eq!(
            resolve(&fresh, &decide(DecisionOutcome::Abandon, 1), &at(1600))
                .unwrap_err()
                .kind,
            RejectionKind::StaleEvidenceRevision
        );
        // a refresh compared against the replaced revision is refused too
        assert_eq!(
            refresh_evidence(&fresh, 1, "ev://3", "sha256:g", &at(1600))
                .unwrap_err()
                .kind,
            RejectionKind::StaleEvidenceRevision
        );
        let decided = resolve(&fresh, &decide(DecisionOutcome::Abandon, 2), &at(1700)).unwrap();
        assert_eq!(
            refresh_evidence(&decided, 2, "ev://3", "sha256:g", &at(1800))
                .unwrap_err()
                .kind,
            RejectionKind::NotAwaitingDecision
        );
    }

    #[test]
    fn refresh_is_refused_when_no_decision_is_awaited() {
        let rec = claim(&bound(0), "w2", 100, &at(1000)).unwrap();
        assert_eq!(
            refresh_evidence(&rec, 0, "ev://1", "sha256:e", &at(1001))
                .unwrap_err()
                .kind,
            RejectionKind::NotAwaitingDecision
        );
    }

    #[test]
    fn absent_records_the_guard_and_authorises_one_execution() {
        let rec = unknown();
        let absent = DecisionOutcome::Absent {
            guard_ref: "guard://proof".into(),
            guard_digest: "sha256:g".into(),
        };
        let decided = resolve(&rec, &decide(absent, 1), &at(2000)).unwrap();
        assert_eq!(decided.claimable_from_ms, Some(2000));
        let exec = claim(&decided, "w3", 100, &at(2000)).unwrap();
        assert!(exec.attempt.as_ref().unwrap().may_execute);
    }
}
