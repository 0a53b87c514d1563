//! The Activity record and its flat row layout: one row per activity, one column per fact.
//!
//! Storage keeps exactly these columns (`COLUMNS`); the Python side never learns the meaning of
//! a column beyond what it needs to index and page. Four columns are derived here, never by
//! storage: `claimable_from_ms` (set by the transitions), `pending_observation`, `unsettled`
//! and `compactable_from_ms` (functions of the facts, written on every encode and checked on
//! every decode).
//!
//! A compacted record (`compacted_at_ms` set, see `compaction`) keeps its key, source receipt,
//! input digest, fence and attempt count, evidence revision, settlement and, in `result_failed`
//! alone of its result group, whether the result failed; every other group is NULL and its
//! input reference is empty. A row that claims compaction but keeps any other
//! fact is a row error.
//!
//! Two clocks: `now.wall_ms` stamps record times meant for people (`*_at_ms`); the lease clock
//! (`now.boot_ms` on boot `now.boot_id`, which wall-clock steps do not move) measures every
//! value that decides a lease or a backoff: `lease_expires_ms` and `claimable_from_ms`, both on
//! the boot named by `lease_boot_id`. A lease-clock value of another boot has passed.

use std::fmt;

/// One reading of the catalog's clock, the time parameter of every transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Now {
    /// The lease clock's domain: the host's boot id (a server clock names its own epoch).
    pub boot_id: String,
    /// Lease-clock milliseconds (CLOCK_BOOTTIME on a host): leases and backoff.
    pub boot_ms: i64,
    /// Wall-clock milliseconds since the epoch: record times for people, never a lease.
    pub wall_ms: i64,
}

impl Now {
    /// Both clocks at `ms` on one boot: what tests and fixtures use.
    pub fn at(boot_id: &str, ms: i64) -> Now {
        Now {
            boot_id: boot_id.to_owned(),
            boot_ms: ms,
            wall_ms: ms,
        }
    }
}

/// Whether the lease-clock time `at_ms`, measured on boot `lease_boot_id`, is reached at `now`:
/// on the same boot when `now` got there, on another boot always (its leases died with it).
pub fn lease_reached(lease_boot_id: &str, at_ms: i64, now: &Now) -> bool {
    lease_boot_id != now.boot_id || at_ms <= now.boot_ms
}

/// The control key: activity ids are only family-local, so world and kind are part of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub world_id: String,
    pub kind: String,
    pub activity_id: String,
}

/// A committed tick receipt: world, run, tick and the durable visibility token of that tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub world_id: String,
    pub run_id: String,
    pub tick: i64,
    pub visibility_token: String,
}

/// What the required projector admits: the key, the source receipt and the immutable input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub key: Key,
    pub source: Receipt,
    pub input_ref: String,
    pub input_digest: String,
    /// The host that owns the device this work drives: only a claim on that host may take it
    /// (`attempt::claim_on`). Empty: any host (simulation, remote work). Immutable.
    pub bound_host: String,
}

/// The current attempt. Its fence is the record's `fence`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub number: i64,
    pub owner: String,
    /// On the record's lease clock (`lease_boot_id`).
    pub lease_expires_ms: i64,
    /// False: the attempt may only reconcile the bound provider operation.
    pub may_execute: bool,
}

/// The provider operation identity, bound once before any external effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub operation_id: String,
    pub fence: i64,
    pub bound_at_ms: i64,
}

/// A confirmed absence with its bounded retry guard, recorded under a live reconcile fence or
/// by an operator's "absent" decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardRecord {
    pub guard_ref: String,
    pub digest: String,
    pub fence: i64,
    pub recorded_at_ms: i64,
    /// True until an execute attempt is claimed on the strength of this guard.
    pub authorizes_execution: bool,
}

/// A bounded reference to a result made durable elsewhere. `failed` marks a failed result (an
/// operator's "abandon" records one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultRef {
    pub result_ref: String,
    pub digest: String,
    pub media_type: String,
    pub size: i64,
    pub failed: bool,
}

/// The recorded result and who recorded it. `attempt` is 0 when an operator decision did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultRecord {
    pub result: ResultRef,
    pub attempt: i64,
    pub fence: i64,
    pub recorded_at_ms: i64,
}

/// The latest "unknown" reconciliation evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvidenceRecord {
    pub evidence_ref: String,
    pub digest: String,
    pub recorded_at_ms: i64,
}

/// The latest operator decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionRecord {
    /// `recovered`, `absent` or `abandon`.
    pub outcome: String,
    pub evidence_revision: i64,
    pub operator: String,
    pub decided_at_ms: i64,
    pub note: String,
}

/// The later receipt that observed the result, with the completion evidence digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementRecord {
    pub run_id: String,
    pub tick: i64,
    pub visibility_token: String,
    pub evidence_digest: String,
    pub settled_at_ms: i64,
}

/// One activity's durable control record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivityRecord {
    pub admission: Admission,
    pub admitted_at_ms: i64,
    /// The highest fence ever issued for this activity (0: never claimed).
    pub fence: i64,
    /// Attempts issued so far; the current attempt, if any, has this number.
    pub attempt_count: i64,
    pub attempt: Option<Attempt>,
    pub binding: Option<Binding>,
    pub retry_guard: Option<GuardRecord>,
    pub result: Option<ResultRecord>,
    pub evidence: Option<EvidenceRecord>,
    pub evidence_revision: i64,
    pub awaiting_decision: bool,
    pub decision: Option<DecisionRecord>,
    pub settlement: Option<SettlementRecord>,
    /// When the activity can next be claimed, on the lease clock; `None` once a result is
    /// recorded.
    pub claimable_from_ms: Option<i64>,
    /// The boot whose lease clock `claimable_from_ms` and the attempt's lease are measured on.
    pub lease_boot_id: String,
    /// Bumped by every transition that changes the record; storage compares-and-swaps on it.
    pub version: i64,
    /// Wall-clock time the record was compacted (`compaction::compact`); `None` while whole.
    pub compacted_at_ms: Option<i64>,
    /// Whether the result a compacted record dropped was a failed one (false while whole: the
    /// result says it). Stored in the `result_failed` column, the one result fact kept.
    pub compacted_result_failed: bool,
}

impl ActivityRecord {
    pub fn key(&self) -> &Key {
        &self.admission.key
    }

    /// Whether the lease-clock time `at_ms` of this record has been reached at `now`. A time
    /// measured on another boot's clock has: the boot that issued it is gone.
    pub fn reached(&self, at_ms: i64, now: &Now) -> bool {
        lease_reached(&self.lease_boot_id, at_ms, now)
    }

    /// Whether the current attempt holds a lease that has not expired at `now`.
    pub fn has_live_attempt(&self, now: &Now) -> bool {
        self.attempt
            .as_ref()
            .is_some_and(|a| !self.reached(a.lease_expires_ms, now))
    }

    /// Whether `claimable_from_ms` has been reached at `now` (the claim's other checks aside).
    pub fn claimable_at(&self, now: &Now) -> bool {
        self.claimable_from_ms
            .is_some_and(|from| self.reached(from, now))
    }

    /// A result is recorded and no later receipt has settled it yet: restage it.
    pub fn pending_observation(&self) -> bool {
        self.result.is_some() && self.settlement.is_none()
    }

    /// Admitted and not settled: the lifecycle gate refuses fork and destroy.
    pub fn unsettled(&self) -> bool {
        self.settlement.is_none()
    }

    /// Whether the activity was refused at admission (`admission::admit_refused`): it holds a
    /// failed result (or, compacted, held one) and never had an attempt. Every other failed
    /// result needs an attempt first, an abandon included (a decision awaits a reconciliation).
    pub fn refused_at_admission(&self) -> bool {
        let failed = match self.result.as_ref() {
            Some(r) => r.result.failed && r.attempt == 0,
            None => self.compacted() && self.compacted_result_failed,
        };
        failed && self.attempt_count == 0
    }

    /// Whether the record was compacted: only its key, input digest and settlement remain.
    pub fn compacted(&self) -> bool {
        self.compacted_at_ms.is_some()
    }

    /// From which wall-clock time the record may be compacted: its settlement time once it is
    /// settled and still whole, else `None` (an unsettled record is never compacted). Storage
    /// indexes this value; `compaction::compactable` decides.
    pub fn compactable_from_ms(&self) -> Option<i64> {
        match (&self.settlement, self.compacted_at_ms) {
            (Some(s), None) => Some(s.settled_at_ms),
            _ => None,
        }
    }

    /// A copy with `version` bumped, ready for the changes of one transition, with its
    /// lease-clock values on `now`'s boot: values of another boot have passed, so the lease
    /// expires now and a claimable record is claimable now.
    pub(crate) fn next(&self, now: &Now) -> ActivityRecord {
        let mut next = self.clone();
        next.version += 1;
        if next.lease_boot_id != now.boot_id {
            if let Some(a) = next.attempt.as_mut() {
                a.lease_expires_ms = now.boot_ms;
            }
            if next.claimable_from_ms.is_some() {
                next.claimable_from_ms = Some(now.boot_ms);
            }
            next.lease_boot_id.clone_from(&now.boot_id);
        }
        next
    }
}

impl ActivityRecord {
    /// A compacted record holds its settlement and nothing the compaction drops.
    fn holds_only_what_compaction_keeps(&self) -> bool {
        self.settlement.is_some()
            && self.admission.input_ref.is_empty()
            && self.attempt.is_none()
            && self.binding.is_none()
            && self.retry_guard.is_none()
            && self.result.is_none()
            && self.evidence.is_none()
            && !self.awaiting_decision
            && self.decision.is_none()
            && self.claimable_from_ms.is_none()
    }
}

/// One SQL value. Booleans are stored as 0/1 integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// One SQL value borrowed from wherever it is held (a row read from storage, a record), so a
/// row is decoded and compared without copying its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellRef<'a> {
    Null,
    Int(i64),
    Text(&'a str),
}

impl Cell {
    pub fn as_ref(&self) -> CellRef<'_> {
        match self {
            Cell::Null => CellRef::Null,
            Cell::Int(i) => CellRef::Int(*i),
            Cell::Text(s) => CellRef::Text(s),
        }
    }
}

impl CellRef<'_> {
    pub fn into_cell(self) -> Cell {
        match self {
            CellRef::Null => Cell::Null,
            CellRef::Int(i) => Cell::Int(i),
            CellRef::Text(s) => Cell::Text(s.to_owned()),
        }
    }
}

/// The flat layout, in storage column order. Storage's schema must list these in this order.
pub const COLUMNS: &[&str] = &[
    "world_id",
    "kind",
    "activity_id",
    "source_run_id",
    "source_tick",
    "source_token",
    "input_ref",
    "input_digest",
    "admitted_at_ms",
    "fence",
    "attempt_count",
    "attempt_owner",
    "lease_expires_ms",
    "may_execute",
    "operation_id",
    "operation_fence",
    "bound_at_ms",
    "guard_ref",
    "guard_digest",
    "guard_fence",
    "guard_at_ms",
    "retry_authorized",
    "result_ref",
    "result_digest",
    "result_media_type",
    "result_size",
    "result_failed",
    "result_attempt",
    "result_fence",
    "result_at_ms",
    "evidence_ref",
    "evidence_digest",
    "evidence_revision",
    "evidence_at_ms",
    "awaiting_decision",
    "decision_outcome",
    "decision_revision",
    "decision_operator",
    "decision_at_ms",
    "decision_note",
    "settled_run_id",
    "settled_tick",
    "settled_token",
    "settlement_evidence_digest",
    "settled_at_ms",
    "claimable_from_ms",
    "lease_boot_id",
    "pending_observation",
    "unsettled",
    "version",
    "compacted_at_ms",
    "compactable_from_ms",
    "bound_host",
];

/// A stored row that does not decode into a record (wrong arity, type, or a half-set group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowError {
    pub column: Option<&'static str>,
    pub message: String,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.column {
            Some(c) => write!(f, "column {c}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for RowError {}

struct Reader<'a, 'b> {
    cells: &'a [CellRef<'b>],
    at: usize,
}

impl Reader<'_, '_> {
    fn err(&self, message: &str) -> RowError {
        RowError {
            column: COLUMNS.get(self.at).copied(),
            message: message.to_owned(),
        }
    }

    fn cell(&mut self) -> CellRef<'_> {
        let c = self.cells[self.at];
        self.at += 1;
        c
    }

    fn opt_text(&mut self) -> Result<Option<String>, RowError> {
        match self.cell() {
            CellRef::Null => Ok(None),
            CellRef::Text(s) => Ok(Some(s.to_owned())),
            CellRef::Int(_) => {
                self.at -= 1;
                Err(self.err("expected text"))
            }
        }
    }

    fn opt_int(&mut self) -> Result<Option<i64>, RowError> {
        match self.cell() {
            CellRef::Null => Ok(None),
            CellRef::Int(i) => Ok(Some(i)),
            CellRef::Text(_) => {
                self.at -= 1;
                Err(self.err("expected integer"))
            }
        }
    }

    fn text(&mut self) -> Result<String, RowError> {
        self.opt_text()?.ok_or_else(|| {
            self.at -= 1;
            self.err("unexpected NULL")
        })
    }

    fn int(&mut self) -> Result<i64, RowError> {
        self.opt_int()?.ok_or_else(|| {
            self.at -= 1;
            self.err("unexpected NULL")
        })
    }

    fn flag(&mut self) -> Result<bool, RowError> {
        match self.int()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => {
                self.at -= 1;
                Err(self.err("expected 0 or 1"))
            }
        }
    }
}

fn group_err(column: &'static str) -> RowError {
    RowError {
        column: Some(column),
        message: "columns of one group must be all set (flags 0 or 1) or all NULL".to_owned(),
    }
}

impl ActivityRecord {
    /// Decodes a stored row (in `COLUMNS` order). The derived columns must agree with the
    /// facts: a row that disagrees with itself is a row error.
    pub fn from_cells(cells: &[Cell]) -> Result<ActivityRecord, RowError> {
        Self::decode(&cells.iter().map(Cell::as_ref).collect::<Vec<_>>(), true)
    }

    /// `from_cells` of a row whose cells are borrowed (no text is copied but the record's own).
    pub fn from_cell_refs(cells: &[CellRef<'_>]) -> Result<ActivityRecord, RowError> {
        Self::decode(cells, true)
    }

    /// Decodes a row ignoring its derived `pending_observation` and `unsettled` cells, which
    /// `to_cells` then recomputes: the schema migration that adds them uses this.
    pub fn from_cells_rederived(cells: &[CellRef<'_>]) -> Result<ActivityRecord, RowError> {
        Self::decode(cells, false)
    }

    fn decode(cells: &[CellRef<'_>], check_derived: bool) -> Result<ActivityRecord, RowError> {
        if cells.len() != COLUMNS.len() {
            return Err(RowError {
                column: None,
                message: format!("expected {} columns, got {}", COLUMNS.len(), cells.len()),
            });
        }
        let mut r = Reader { cells, at: 0 };
        let key = Key {
            world_id: r.text()?,
            kind: r.text()?,
            activity_id: r.text()?,
        };
        let source = Receipt {
            world_id: key.world_id.clone(),
            run_id: r.text()?,
            tick: r.int()?,
            visibility_token: r.text()?,
        };
        let mut admission = Admission {
            key,
            source,
            input_ref: r.text()?,
            input_digest: r.text()?,
            bound_host: String::new(),
        };
        let admitted_at_ms = r.int()?;
        let fence = r.int()?;
        let attempt_count = r.int()?;
        let attempt = match (r.opt_text()?, r.opt_int()?, r.opt_int()?) {
            (Some(owner), Some(lease_expires_ms), Some(may @ (0 | 1))) => Some(Attempt {
                number: attempt_count,
                owner,
                lease_expires_ms,
                may_execute: may == 1,
            }),
            (None, None, None) => None,
            _ => return Err(group_err("attempt_owner")),
        };
        let binding = match (r.opt_text()?, r.opt_int()?, r.opt_int()?) {
            (Some(operation_id), Some(fence), Some(bound_at_ms)) => Some(Binding {
                operation_id,
                fence,
                bound_at_ms,
            }),
            (None, None, None) => None,
            _ => return Err(group_err("operation_id")),
        };
        let guard = (r.opt_text()?, r.opt_text()?, r.opt_int()?, r.opt_int()?);
        let retry_authorized = r.flag()?;
        let retry_guard = match guard {
            (Some(guard_ref), Some(digest), Some(fence), Some(recorded_at_ms)) => {
                Some(GuardRecord {
                    guard_ref,
                    digest,
                    fence,
                    recorded_at_ms,
                    authorizes_execution: retry_authorized,
                })
            }
            (None, None, None, None) if !retry_authorized => None,
            _ => return Err(group_err("guard_ref")),
        };
        let mut compacted_failed: Option<bool> = None;
        let result = match (
            r.opt_text()?,
            r.opt_text()?,
            r.opt_text()?,
            r.opt_int()?,
            r.opt_int()?,
            r.opt_int()?,
            r.opt_int()?,
            r.opt_int()?,
        ) {
            (
                Some(result_ref),
                Some(digest),
                Some(media_type),
                Some(size),
                Some(failed @ (0 | 1)),
                Some(attempt),
                Some(fence),
                Some(recorded_at_ms),
            ) => Some(ResultRecord {
                result: ResultRef {
                    result_ref,
                    digest,
                    media_type,
                    size,
                    failed: failed == 1,
                },
                attempt,
                fence,
                recorded_at_ms,
            }),
            (None, None, None, None, None, None, None, None) => None,
            // A compacted record keeps only whether its result failed (checked below).
            (None, None, None, None, Some(failed @ (0 | 1)), None, None, None) => {
                compacted_failed = Some(failed == 1);
                None
            }
            _ => return Err(group_err("result_ref")),
        };
        let evidence = (r.opt_text()?, r.opt_text()?);
        let evidence_revision = r.int()?;
        let evidence = match (evidence, r.opt_int()?) {
            ((Some(evidence_ref), Some(digest)), Some(recorded_at_ms)) => Some(EvidenceRecord {
                evidence_ref,
                digest,
                recorded_at_ms,
            }),
            ((None, None), None) => None,
            _ => return Err(group_err("evidence_ref")),
        };
        let awaiting_decision = r.flag()?;
        let decision = match (
            r.opt_text()?,
            r.opt_int()?,
            r.opt_text()?,
            r.opt_int()?,
            r.opt_text()?,
        ) {
            (
                Some(outcome),
                Some(evidence_revision),
                Some(operator),
                Some(decided_at_ms),
                Some(note),
            ) => Some(DecisionRecord {
                outcome,
                evidence_revision,
                operator,
                decided_at_ms,
                note,
            }),
            (None, None, None, None, None) => None,
            _ => return Err(group_err("decision_outcome")),
        };
        let settlement = match (
            r.opt_text()?,
            r.opt_int()?,
            r.opt_text()?,
            r.opt_text()?,
            r.opt_int()?,
        ) {
            (
                Some(run_id),
                Some(tick),
                Some(visibility_token),
                Some(evidence_digest),
                Some(settled_at_ms),
            ) => Some(SettlementRecord {
                run_id,
                tick,
                visibility_token,
                evidence_digest,
                settled_at_ms,
            }),
            (None, None, None, None, None) => None,
            _ => return Err(group_err("settled_run_id")),
        };
        let claimable_from_ms = r.opt_int()?;
        let lease_boot_id = r.text()?;
        let pending_observation = r.flag()?;
        let unsettled = r.flag()?;
        let version = r.int()?;
        let compacted_at_ms = r.opt_int()?;
        let compactable_from_ms = r.opt_int()?;
        admission.bound_host = r.text()?;
        if compacted_failed.is_some() != compacted_at_ms.is_some() {
            return Err(group_err("result_ref"));
        }
        let rec = ActivityRecord {
            admission,
            admitted_at_ms,
            fence,
            attempt_count,
            attempt,
            binding,
            retry_guard,
            result,
            evidence,
            evidence_revision,
            awaiting_decision,
            decision,
            settlement,
            claimable_from_ms,
            lease_boot_id,
            version,
            compacted_at_ms,
            compacted_result_failed: compacted_failed.unwrap_or(false),
        };
        if rec.compacted() && !rec.holds_only_what_compaction_keeps() {
            return Err(RowError {
                column: Some("compacted_at_ms"),
                message: "a compacted row keeps only its key, input digest and settlement"
                    .to_owned(),
            });
        }
        if check_derived && compactable_from_ms != rec.compactable_from_ms() {
            return Err(RowError {
                column: Some("compactable_from_ms"),
                message: "disagrees with the recorded settlement and compaction".to_owned(),
            });
        }
        if check_derived {
            for (column, stored, derived) in [
                (
                    "pending_observation",
                    pending_observation,
                    rec.pending_observation(),
                ),
                ("unsettled", unsettled, rec.unsettled()),
            ] {
                if stored != derived {
                    return Err(RowError {
                        column: Some(column),
                        message: "disagrees with the recorded result and settlement".to_owned(),
                    });
                }
            }
        }
        Ok(rec)
    }

    /// Encodes the record as a row in `COLUMNS` order.
    pub fn to_cells(&self) -> Vec<Cell> {
        self.to_cell_refs()
            .into_iter()
            .map(CellRef::into_cell)
            .collect()
    }

    /// `to_cells`, each cell borrowed from the record (no text is copied).
    pub fn to_cell_refs(&self) -> Vec<CellRef<'_>> {
        fn t(s: &str) -> CellRef<'_> {
            CellRef::Text(s)
        }
        fn ot(s: Option<&str>) -> CellRef<'_> {
            s.map_or(CellRef::Null, t)
        }
        fn oi<'a>(i: Option<i64>) -> CellRef<'a> {
            i.map_or(CellRef::Null, CellRef::Int)
        }
        fn b<'a>(v: bool) -> CellRef<'a> {
            CellRef::Int(i64::from(v))
        }
        let a = &self.admission;
        let at = self.attempt.as_ref();
        let bd = self.binding.as_ref();
        let g = self.retry_guard.as_ref();
        let res = self.result.as_ref();
        let ev = self.evidence.as_ref();
        let d = self.decision.as_ref();
        let s = self.settlement.as_ref();
        let mut cells = Vec::with_capacity(COLUMNS.len());
        cells.extend([
            t(&a.key.world_id),
            t(&a.key.kind),
            t(&a.key.activity_id),
            t(&a.source.run_id),
            CellRef::Int(a.source.tick),
            t(&a.source.visibility_token),
            t(&a.input_ref),
            t(&a.input_digest),
            CellRef::Int(self.admitted_at_ms),
            CellRef::Int(self.fence),
            CellRef::Int(self.attempt_count),
            ot(at.map(|x| x.owner.as_str())),
            oi(at.map(|x| x.lease_expires_ms)),
            oi(at.map(|x| i64::from(x.may_execute))),
            ot(bd.map(|x| x.operation_id.as_str())),
            oi(bd.map(|x| x.fence)),
            oi(bd.map(|x| x.bound_at_ms)),
            ot(g.map(|x| x.guard_ref.as_str())),
            ot(g.map(|x| x.digest.as_str())),
            oi(g.map(|x| x.fence)),
            oi(g.map(|x| x.recorded_at_ms)),
            b(g.is_some_and(|x| x.authorizes_execution)),
            ot(res.map(|x| x.result.result_ref.as_str())),
            ot(res.map(|x| x.result.digest.as_str())),
            ot(res.map(|x| x.result.media_type.as_str())),
            oi(res.map(|x| x.result.size)),
            oi(res
                .map(|x| x.result.failed)
                .or(self.compacted().then_some(self.compacted_result_failed))
                .map(i64::from)),
            oi(res.map(|x| x.attempt)),
            oi(res.map(|x| x.fence)),
            oi(res.map(|x| x.recorded_at_ms)),
            ot(ev.map(|x| x.evidence_ref.as_str())),
            ot(ev.map(|x| x.digest.as_str())),
            CellRef::Int(self.evidence_revision),
            oi(ev.map(|x| x.recorded_at_ms)),
            b(self.awaiting_decision),
            ot(d.map(|x| x.outcome.as_str())),
            oi(d.map(|x| x.evidence_revision)),
            ot(d.map(|x| x.operator.as_str())),
            oi(d.map(|x| x.decided_at_ms)),
            ot(d.map(|x| x.note.as_str())),
            ot(s.map(|x| x.run_id.as_str())),
            oi(s.map(|x| x.tick)),
            ot(s.map(|x| x.visibility_token.as_str())),
            ot(s.map(|x| x.evidence_digest.as_str())),
            oi(s.map(|x| x.settled_at_ms)),
            oi(self.claimable_from_ms),
            t(&self.lease_boot_id),
            b(self.pending_observation()),
            b(self.unsettled()),
            CellRef::Int(self.version),
            oi(self.compacted_at_ms),
            oi(self.compactable_from_ms()),
            t(&a.bound_host),
        ]);
        cells
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::scenario_tests::{admission, admitted, BOOT};

    #[test]
    fn columns_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in COLUMNS {
            assert!(seen.insert(c), "duplicate column {c}");
        }
    }

    #[test]
    fn a_fresh_record_round_trips_through_cells() {
        let rec = admitted(&admission("w", "k", "a"), 5);
        assert_eq!(rec.to_cells().len(), COLUMNS.len());
        assert_eq!(ActivityRecord::from_cells(&rec.to_cells()).unwrap(), rec);
    }

    #[test]
    fn derived_columns_follow_the_facts_and_a_row_that_disagrees_is_refused() {
        let rec = admitted(&admission("w", "k", "a"), 5);
        let at = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
        let cells = rec.to_cells();
        assert_eq!(cells[at("pending_observation")], Cell::Int(0));
        assert_eq!(cells[at("unsettled")], Cell::Int(1));
        assert_eq!(cells[at("lease_boot_id")], Cell::Text(BOOT.into()));
        for (column, value) in [("pending_observation", 1), ("unsettled", 0)] {
            let mut bad = cells.clone();
            bad[at(column)] = Cell::Int(value);
            assert_eq!(
                ActivityRecord::from_cells(&bad).unwrap_err().column,
                Some(COLUMNS[at(column)])
            );
            // The migration's decode ignores them; encoding writes what the facts say.
            let refs: Vec<CellRef<'_>> = bad.iter().map(Cell::as_ref).collect();
            let fixed = ActivityRecord::from_cells_rederived(&refs).unwrap();
            assert_eq!(fixed.to_cells(), cells);
        }
    }

    #[test]
    fn wrong_arity_and_types_are_row_errors() {
        let rec = admitted(&admission("w", "k", "a"), 5);
        let mut cells = rec.to_cells();
        cells.pop();
        assert!(ActivityRecord::from_cells(&cells).is_err());
        let mut cells = rec.to_cells();
        cells[4] = Cell::Text("x".into());
        let err = ActivityRecord::from_cells(&cells).unwrap_err();
        assert_eq!(err.column, Some("source_tick"));
        let mut cells = rec.to_cells();
        cells[11] = Cell::Text("owner".into());
        assert_eq!(
            ActivityRecord::from_cells(&cells).unwrap_err().column,
            Some("attempt_owner")
        );
        let mut cells = rec.to_cells();
        cells[34] = Cell::Int(7);
        assert_eq!(
            ActivityRecord::from_cells(&cells).unwrap_err().column,
            Some("awaiting_decision")
        );
    }
}
