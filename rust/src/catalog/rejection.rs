//! Why a transition was refused: one kind per rule, each with a stable snake_case code.

use std::fmt;

/// The reason a transition was refused. Codes are stable: Python maps each to an exception class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectionKind {
    /// The fence is not the one of the current attempt (a newer claim or a decision superseded it).
    StaleFence,
    /// The fence is current but its lease has expired.
    LeaseExpired,
    /// Same key, different immutable admission fields.
    AdmissionConflict,
    /// A different result is already recorded.
    ResultConflict,
    /// An execute attempt tried to record a result before binding its provider operation.
    NotBound,
    /// A reconcile-only attempt tried something only an execute attempt may do.
    ReconcileOnly,
    /// An execute attempt tried something only a reconcile attempt may do.
    NotReconciling,
    /// The activity awaits an operator decision and its reconciliation backoff has not elapsed.
    AwaitingDecision,
    /// `resolve` on an activity that awaits no decision (decisions are usable once).
    NotAwaitingDecision,
    /// The decision names an evidence revision that is no longer current.
    StaleEvidenceRevision,
    /// The decision is malformed (unknown outcome, "absent" without a retry guard, ...).
    InvalidDecision,
    /// The receipt does not fit: other world or run, or a tick not later than the source tick.
    ReceiptMismatch,
    /// A receipt without a visibility token cannot admit or settle work.
    TokenlessReceipt,
    /// The completion evidence does not bind this activity's kind, id and result.
    EvidenceMismatch,
    /// A different settlement is already recorded.
    SettlementConflict,
    /// Settlement before any result is recorded.
    NoResult,
    /// The operation id is not this activity's derived identity (or another is bound).
    OperationConflict,
    /// Release of an execute attempt whose provider operation is already bound.
    OperationBound,
    /// The activity cannot be claimed now (live lease, or a result is recorded).
    NotClaimable,
    /// A field is empty, too long, or a number is out of range.
    BoundsExceeded,
    /// The record was compacted: only admission (as a no-op) and its exact settlement apply.
    Compacted,
    /// Compaction refused: the record is unsettled, or settled after the cutoff.
    NotCompactable,
    /// `admit_refused` with a refusal that is not a failed result (or poses as an abandon).
    InvalidRefusal,
    /// A claim on a host other than the one the activity's device is bound to.
    WrongHost,
}

impl RejectionKind {
    pub const ALL: [RejectionKind; 24] = [
        RejectionKind::StaleFence,
        RejectionKind::LeaseExpired,
        RejectionKind::AdmissionConflict,
        RejectionKind::ResultConflict,
        RejectionKind::NotBound,
        RejectionKind::ReconcileOnly,
        RejectionKind::NotReconciling,
        RejectionKind::AwaitingDecision,
        RejectionKind::NotAwaitingDecision,
        RejectionKind::StaleEvidenceRevision,
        RejectionKind::InvalidDecision,
        RejectionKind::ReceiptMismatch,
        RejectionKind::TokenlessReceipt,
        RejectionKind::EvidenceMismatch,
        RejectionKind::SettlementConflict,
        RejectionKind::NoResult,
        RejectionKind::OperationConflict,
        RejectionKind::OperationBound,
        RejectionKind::NotClaimable,
        RejectionKind::BoundsExceeded,
        RejectionKind::Compacted,
        RejectionKind::NotCompactable,
        RejectionKind::InvalidRefusal,
        RejectionKind::WrongHost,
    ];

    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::StaleFence => "stale_fence",
            RejectionKind::LeaseExpired => "lease_expired",
            RejectionKind::AdmissionConflict => "admission_conflict",
            RejectionKind::ResultConflict => "result_conflict",
            RejectionKind::NotBound => "not_bound",
            RejectionKind::ReconcileOnly => "reconcile_only",
            RejectionKind::NotReconciling => "not_reconciling",
            RejectionKind::AwaitingDecision => "awaiting_decision",
            RejectionKind::NotAwaitingDecision => "not_awaiting_decision",
            RejectionKind::StaleEvidenceRevision => "stale_evidence_revision",
            RejectionKind::InvalidDecision => "invalid_decision",
            RejectionKind::ReceiptMismatch => "receipt_mismatch",
            RejectionKind::TokenlessReceipt => "tokenless_receipt",
            RejectionKind::EvidenceMismatch => "evidence_mismatch",
            RejectionKind::SettlementConflict => "settlement_conflict",
            RejectionKind::NoResult => "no_result",
            RejectionKind::OperationConflict => "operation_conflict",
            RejectionKind::OperationBound => "operation_bound",
            RejectionKind::NotClaimable => "not_claimable",
            RejectionKind::BoundsExceeded => "bounds_exceeded",
            RejectionKind::Compacted => "compacted",
            RejectionKind::NotCompactable => "not_compactable",
            RejectionKind::InvalidRefusal => "invalid_refusal",
            RejectionKind::WrongHost => "wrong_host",
        }
    }
}

/// A refused transition: the kind, the field it concerns (if one), and a human message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub kind: RejectionKind,
    pub field: Option<&'static str>,
    pub message: String,
}

impl Rejection {
    pub(crate) fn new(kind: RejectionKind, message: impl Into<String>) -> Rejection {
        Rejection {
            kind,
            field: None,
            message: message.into(),
        }
    }

    pub(crate) fn on(
        kind: RejectionKind,
        field: &'static str,
        message: impl Into<String>,
    ) -> Rejection {
        Rejection {
            kind,
            field: Some(field),
            message: message.into(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            Some(field) => write!(f, "{} ({field}): {}", self.kind.code(), self.message),
            None => write!(f, "{}: {}", self.kind.code(), self.message),
        }
    }
}

impl std::error::Error for Rejection {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for k in RejectionKind::ALL {
            let c = k.code();
            assert!(
                c.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'),
                "{c}"
            );
            assert!(seen.insert(c), "duplicate code {c}");
        }
    }
}
