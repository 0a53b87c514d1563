//! The Activity catalog's fencing state machine.
//!
//! Pure: this module never opens a file, reads a clock or talks to a database. Every transition
//! takes the current [`ActivityRecord`] and a clock reading [`Now`] and returns the next record
//! or a typed [`Rejection`]; storage persists exactly what comes back (compare-and-swap on
//! `version`).
//!
//! Rules (seed "Activities", sections 2, 5 and 7):
//! - A record is keyed by `(world_id, kind, activity_id)`; its admission (source receipt, input
//!   reference and digest) is immutable. Replaying an identical admission is a no-op, and so is
//!   the same request from a later tick of the source run (it is the same Activity; its source
//!   binding stays). Any other difference is an `admission_conflict`.
//! - Work bound to a device is claimed only on the host that owns it: the admission's
//!   `bound_host` (immutable; empty for simulation and remote work, which any host claims).
//! - A claim issues a new attempt under a fence one higher than any fence issued before. Only the
//!   live attempt (current fence, lease not expired) may change the record.
//! - Leases and backoff are measured on the lease clock (`Now::boot_ms` of `Now::boot_id`, which
//!   wall-clock steps never move); a lease or backoff of another boot has passed. Leases are
//!   1 ms to 7 days (`MAX_LEASE_MS`), reconciliation backoff 0 to 7 days (`MAX_RETRY_AFTER_MS`).
//!   Record times (`*_at_ms`) are wall-clock, for people, and decide nothing.
//! - An attempt may execute only while no provider operation is bound, or once after a confirmed
//!   absence whose retry guard authorises it. Otherwise it may only reconcile.
//! - The provider operation identity is bound before any external effect and never changes. It
//!   is the derived `operation_id_for(kind, world_id, activity_id)`, so one identity names
//!   exactly one activity without any cross-record check.
//! - A recorded result never changes; settlement needs a later receipt of the same world and run
//!   and completion evidence bound to the result.
//! - Completion evidence (built and verified in `completion`) binds kind, id and the exact
//!   result to the complete fact set; `settle` requires its settlement digest.
//! - There is no lifecycle-status enum: views derive from the facts, and the derived values
//!   storage indexes (`claimable_from_ms`, `pending_observation`, `unsettled`,
//!   `compactable_from_ms`) are computed here, never by SQL.
//! - Retention (`compaction`): a settled record may be compacted to its key, source receipt,
//!   input digest and settlement; an unsettled one never is. A compacted key is never admitted
//!   afresh (same digest: no-op; anything else: `admission_conflict`), its exact settlement is
//!   a no-op and every other transition is refused (`compacted`).
//! - A request its family's admission check refuses (it can never run) is admitted by
//!   `admit_refused`, already holding the failed result that references the durable refusal
//!   document: no attempt, no fence, no provider operation, never claimable; it is observed
//!   and settled like any other failed result. Its replay rules are `admit`'s, and a replay
//!   never changes a record that exists (`refused_at_admission` tells such a record).

mod admission;
mod attempt;
mod bounds;
mod compaction;
mod completion;
mod decision;
mod identity;
mod provider;
mod record;
mod rejection;
mod result;
mod settlement;

#[cfg(test)]
mod scenario_tests;

pub use admission::{admission_template, admit, admit_refused, Admitted, Stamp, ADMISSION_STAMPS};
pub use attempt::{check_claim, check_claim_on, claim, claim_on, rebase, release, renew};
pub use bounds::{
    MAX_DIGEST_BYTES, MAX_ID_BYTES, MAX_KIND_BYTES, MAX_LEASE_MS, MAX_NOTE_BYTES,
    MAX_OPERATION_ID_BYTES, MAX_REF_BYTES, MAX_RETRY_AFTER_MS,
};
pub use compaction::{compact, compactable};
pub use completion::{
    completion_evidence, facts_digest, verify_completion, CompletionMismatch, Fact,
};
pub use decision::{refresh_evidence, resolve, Decision, DecisionOutcome, ABANDONED_MEDIA_TYPE};
pub use identity::{operation_id_for, settlement_evidence_digest};
pub use provider::{bind_provider_operation, claim_and_bind_on, confirm_absent, record_unknown};
pub use record::{
    lease_reached, ActivityRecord, Admission, Attempt, Binding, Cell, CellRef, DecisionRecord,
    EvidenceRecord, GuardRecord, Key, Now, Receipt, ResultRecord, ResultRef, RowError,
    SettlementRecord, COLUMNS,
};
pub use rejection::{Rejection, RejectionKind};
pub use result::record_result;
pub use settlement::settle;
