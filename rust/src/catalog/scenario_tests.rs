//! Shared fixtures and a property test driving several workers, a lease clock that reboots and
//! a wall clock that steps both ways through random interleavings of every transition, checking
//! the catalog invariants after each step.

use super::*;
use proptest::prelude::*;

/// The boot of the fixtures' lease clock.
pub(crate) const BOOT: &str = "boot-1";

/// Both clocks at `ms` on `BOOT`.
pub(crate) fn at(ms: i64) -> Now {
    Now::at(BOOT, ms)
}

pub(crate) fn admission(world: &str, kind: &str, id: &str) -> Admission {
    Admission {
        key: Key {
            world_id: world.into(),
            kind: kind.into(),
            activity_id: id.into(),
        },
        source: Receipt {
            world_id: world.into(),
            run_id: "run-1".into(),
            tick: 5,
            visibility_token: "tok-5".into(),
        },
        input_ref: "input://1".into(),
        input_digest: "sha256:in".into(),
        bound_host: String::new(),
    }
}

pub(crate) fn admitted(adm: &Admission, now_ms: i64) -> ActivityRecord {
    admit(None, adm, &at(now_ms)).unwrap().0
}

pub(crate) fn result_ref(name: &str) -> ResultRef {
    ResultRef {
        result_ref: name.into(),
        digest: format!("sha256:{name}"),
        media_type: "application/json".into(),
        size: 1,
        failed: false,
    }
}

/// Admitted at `now_ms`, claimed by `w1` for 100 ms under fence 1, operation bound.
pub(crate) fn bound(now_ms: i64) -> ActivityRecord {
    let rec = claim(
        &admitted(&admission("w", "k", "a"), now_ms),
        "w1",
        100,
        &at(now_ms),
    )
    .unwrap();
    bind_provider_operation(&rec, 1, &operation_id_for("k", "w", "a"), &at(now_ms)).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Tick(i64),
    /// A new boot: its lease clock restarts at the given value.
    Reboot(i64),
    /// The wall clock steps (either way); no lease or backoff may notice.
    WallStep(i64),
    Claim(usize, i64),
    Renew(usize, i64),
    Release(usize),
    Bind(usize),
    Record(usize, u8),
    Absent(usize),
    Unknown(usize, i64),
    Resolve(u8, i64),
    Settle(u8),
    /// Compaction with a wall-clock cutoff this far from the current wall time.
    Compact(i64),
    /// A projection asks for the key again (0: same input, 1: another input).
    Readmit(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1i64..300).prop_map(Op::Tick),
        (0i64..50).prop_map(Op::Reboot),
        (-3_600_000i64..3_600_000).prop_map(Op::WallStep),
        (0usize..3, 1i64..200).prop_map(|(w, l)| Op::Claim(w, l)),
        (0usize..3, 1i64..200).prop_map(|(w, l)| Op::Renew(w, l)),
        (0usize..3).prop_map(Op::Release),
        (0usize..3).prop_map(Op::Bind),
        (0usize..3, 0u8..2).prop_map(|(w, r)| Op::Record(w, r)),
        (0usize..3).prop_map(Op::Absent),
        (0usize..3, 0i64..100).prop_map(|(w, b)| Op::Unknown(w, b)),
        (0u8..3, 0i64..3).prop_map(|(d, r)| Op::Resolve(d, r)),
        (0u8..2).prop_map(Op::Settle),
        (-100i64..100).prop_map(Op::Compact),
        (0u8..2).prop_map(Op::Readmit),
    ]
}

proptest! {
    #[test]
    fn invariants_hold_under_random_interleavings(ops in proptest::collection::vec(op(), 1..80)) {
        let mut now = 0i64;
        let mut boot = 1u32;
        let mut wall = 1_700_000_000_000i64;
        let mut rec = admitted(&admission("w", "k", "a"), now);
        // The lease the model believes was last granted: (boot, expiry on that boot's clock).
        let mut granted: Option<(u32, i64)> = None;
        // The fence each worker believes it holds.
        let mut held: [Option<i64>; 3] = [None; 3];
        // Whether an execute attempt is permitted by an unused confirmed absence.
        let mut executions_after_bind = 0;
        let mut absences = 0;
        let op_id = operation_id_for("k", "w", "a");
        for op in ops {
            let before = rec.clone();
            let fence_of = |w: usize| held[w].unwrap_or(0);
            let t = Now { boot_id: format!("boot-{boot}"), boot_ms: now, wall_ms: wall };
            let out = match &op {
                Op::Tick(d) => { now += d; wall += d; Ok(rec.clone()) }
                Op::Reboot(ms) => { boot += 1; now = *ms; Ok(rec.clone()) }
                Op::WallStep(d) => { wall += d; Ok(rec.clone()) }
                Op::Claim(_, l) => claim(&rec, "worker", *l, &t),
                Op::Renew(w, l) => renew(&rec, fence_of(*w), *l, &t),
                Op::Release(w) => release(&rec, fence_of(*w), &t),
                Op::Bind(w) => bind_provider_operation(&rec, fence_of(*w), &op_id, &t),
                Op::Record(w, r) => record_result(&rec, fence_of(*w), &result_ref(&format!("r{r}")), &t),
                Op::Absent(w) => confirm_absent(&rec, fence_of(*w), "guard://g", "sha256:g", &t),
                Op::Unknown(w, b) => record_unknown(&rec, fence_of(*w), "ev://e", "sha256:e", *b, &t),
                Op::Resolve(d, r) => {
                    let outcome = match d {
                        0 => DecisionOutcome::Recovered(result_ref("op")),
                        1 => DecisionOutcome::Absent { guard_ref: "guard://op".into(), guard_digest: "sha256:op".into() },
                        _ => DecisionOutcome::Abandon,
                    };
                    resolve(&rec, &Decision { outcome, evidence_revision: *r, operator: "op".into(), note: String::new() }, &t)
                }
                Op::Settle(good) => {
                    let digest = match (&rec.result, good) {
                        (Some(r), 1) => settlement_evidence_digest("k", "w", "a", &r.result.result_ref, &r.result.digest),
                        _ => "sha256:wrong".to_owned(),
                    };
                    let receipt = Receipt { world_id: "w".into(), run_id: "run-1".into(), tick: 9, visibility_token: "t9".into() };
                    settle(&rec, &receipt, &digest, None, &t)
                }
                Op::Compact(d) => compact(&rec, wall + d, &t),
                Op::Readmit(other) => {
                    let mut again = admission("w", "k", "a");
                    again.source.tick = 7;
                    again.source.visibility_token = "tok-7".into();
                    if *other == 1 { again.input_digest = "sha256:other".into(); }
                    admit(Some(&rec), &again, &t).map(|(r, how)| {
                        assert_ne!(how, Admitted::New);
                        r
                    })
                }
            };
            if let Err(e) = &out {
                // A compacted record refuses every transition but its no-op admission and
                // its exact settlement; compaction refuses exactly the unsettled and the late.
                if before.compacted() && !matches!(op, Op::Readmit(_) | Op::Settle(_)) {
                    prop_assert_eq!(e.kind, RejectionKind::Compacted);
                }
                if let Op::Compact(d) = &op {
                    prop_assert_eq!(e.kind, RejectionKind::NotCompactable);
                    prop_assert!(before.settlement.as_ref().is_none_or(|s| s.settled_at_ms > wall + d));
                }
            }
            if let Ok(next) = out {
                // A stale fence never changes a record.
                if let Op::Renew(w, _) | Op::Release(w) | Op::Bind(w) | Op::Absent(w) | Op::Unknown(w, _) = &op {
                    prop_assert_eq!(held[*w], Some(before.fence));
                }
                if let Op::Record(w, _) = &op {
                    if next != before { prop_assert_eq!(held[*w], Some(before.fence)); }
                }
                if let Op::Claim(w, _) = &op {
                    // Never over a lease the model still holds live on this boot's clock, and
                    // always on this boot's clock.
                    if let Some((b, expires)) = granted {
                        prop_assert!(b != boot || expires <= now, "claimed over a live lease");
                    }
                    let a = next.attempt.as_ref().unwrap();
                    prop_assert_eq!(&next.lease_boot_id, &format!("boot-{boot}"));
                    granted = Some((boot, a.lease_expires_ms));
                    // At most one live attempt: every other worker's fence is now stale.
                    held = [None; 3];
                    held[*w] = Some(next.fence);
                    let may = next.attempt.as_ref().unwrap().may_execute;
                    if before.binding.is_some() && may {
                        executions_after_bind += 1;
                        prop_assert!(executions_after_bind <= absences, "execute after bind without absence");
                    }
                }
                if let Op::Renew(..) = &op {
                    granted = Some((boot, next.attempt.as_ref().unwrap().lease_expires_ms));
                }
                if next.attempt.is_none() {
                    granted = None; // the attempt ended (release, conclusion, decision)
                }
                if matches!(op, Op::Absent(_)) { absences += 1; }
                if let (Op::Resolve(1, _), true) = (&op, next != before) { absences += 1; }
                // Fences never decrease; a recorded result never changes (compaction drops it).
                prop_assert!(next.fence >= before.fence);
                if let (Some(r), false) = (before.result.as_ref(), next.compacted()) {
                    prop_assert_eq!(next.result.as_ref(), Some(r));
                }
                // Compaction happens only to a settled record, and a compacted one never changes.
                if next.compacted() {
                    prop_assert!(next.settlement.is_some());
                    prop_assert_eq!(&next.admission.input_digest, &before.admission.input_digest);
                    if before.compacted() { prop_assert_eq!(&next, &before); }
                }
                if matches!(op, Op::Readmit(_)) { prop_assert_eq!(&next, &before); }
                if before.settlement.is_some() { prop_assert_eq!(&next.settlement, &before.settlement); }
                if let (None, Some(_)) = (&before.settlement, &next.settlement) {
                    prop_assert!(matches!(op, Op::Settle(1)));
                }
                // claimable_from is None exactly when a result exists (or existed: compacted).
                prop_assert_eq!(
                    next.claimable_from_ms.is_none(),
                    next.result.is_some() || next.compacted()
                );
                // A claim and an accepted decision each raise the fence.
                if matches!(op, Op::Claim(..)) || (matches!(op, Op::Resolve(..)) && next != before) {
                    prop_assert!(next.fence > before.fence);
                }
                if let Some(a) = next.attempt.as_ref() {
                    // Never claimable while the attempt's lease is live.
                    prop_assert!(next.claimable_from_ms.is_some_and(|f| f >= a.lease_expires_ms));
                    // Never an execute attempt while a decision is awaited.
                    prop_assert!(!(next.awaiting_decision && a.may_execute));
                }
                // The derived columns follow the facts.
                prop_assert_eq!(next.pending_observation(), next.result.is_some() && next.settlement.is_none());
                prop_assert_eq!(next.unsettled(), next.settlement.is_none());
                prop_assert_eq!(
                    next.compactable_from_ms(),
                    next.settlement.as_ref().filter(|_| !next.compacted()).map(|s| s.settled_at_ms)
                );
                // The row layout round-trips every reachable record.
                prop_assert_eq!(ActivityRecord::from_cells(&next.to_cells()).unwrap(), next.clone());
                rec = next;
            }
        }
    }
}

/// A settled record (claimed, bound, result, settled by tick 9 at wall time 40), compacted.
fn compacted_fixture() -> ActivityRecord {
    let rec = record_result(&bound(0), 1, &result_ref("r0"), &at(20)).unwrap();
    let digest = settlement_evidence_digest("k", "w", "a", "r0", "sha256:r0");
    let receipt = Receipt {
        world_id: "w".into(),
        run_id: "run-1".into(),
        tick: 9,
        visibility_token: "t9".into(),
    };
    let rec = settle(&rec, &receipt, &digest, None, &at(40)).unwrap();
    compact(&rec, 40, &at(50)).unwrap()
}

proptest! {
    /// Once compacted, a record never changes: every transition, at any time on any boot with
    /// any fence, is refused or is a no-op, and admission never admits afresh.
    #[test]
    fn a_compacted_record_never_changes(
        ops in proptest::collection::vec((op(), -5i64..5, 0u32..3, 0i64..1_000_000), 1..40),
    ) {
        let rec = compacted_fixture();
        for (op, fence_delta, boot, ms) in ops {
            let t = Now { boot_id: format!("boot-{boot}"), boot_ms: ms, wall_ms: ms };
            let f = rec.fence + fence_delta;
            let out = match &op {
                Op::Tick(_) | Op::Reboot(_) | Op::WallStep(_) => rebase(&rec, &t),
                Op::Claim(_, l) => claim(&rec, "worker", *l, &t),
                Op::Renew(_, l) => renew(&rec, f, *l, &t),
                Op::Release(_) => release(&rec, f, &t),
                Op::Bind(_) => bind_provider_operation(&rec, f, &operation_id_for("k", "w", "a"), &t),
                Op::Record(_, r) => record_result(&rec, f, &result_ref(&format!("r{r}")), &t),
                Op::Absent(_) => confirm_absent(&rec, f, "guard://g", "sha256:g", &t),
                Op::Unknown(_, b) => record_unknown(&rec, f, "ev://e", "sha256:e", *b, &t),
                Op::Resolve(_, r) => resolve(&rec, &Decision { outcome: DecisionOutcome::Abandon, evidence_revision: *r, operator: "op".into(), note: String::new() }, &t),
                Op::Settle(good) => {
                    let digest = if *good == 1 { settlement_evidence_digest("k", "w", "a", "r0", "sha256:r0") } else { "sha256:wrong".into() };
                    let receipt = Receipt { world_id: "w".into(), run_id: "run-1".into(), tick: 9, visibility_token: "t9".into() };
                    settle(&rec, &receipt, &digest, None, &t)
                }
                Op::Compact(d) => compact(&rec, ms + d, &t),
                Op::Readmit(other) => {
                    let mut again = admission("w", "k", "a");
                    again.source.tick = 5 + i64::from(boot);
                    again.source.visibility_token = format!("tok-{}", again.source.tick);
                    if *other == 1 { again.input_digest = "sha256:other".into(); }
                    admit(Some(&rec), &again, &t).map(|(r, how)| {
                        assert_ne!(how, Admitted::New);
                        r
                    })
                }
            };
            match out {
                Ok(next) => prop_assert_eq!(next, rec.clone()),
                Err(e) => prop_assert!(
                    matches!(
                        (&op, e.kind),
                        (Op::Readmit(1), RejectionKind::AdmissionConflict)
                            | (Op::Settle(0), RejectionKind::SettlementConflict)
                            | (_, RejectionKind::Compacted)
                    ),
                    "{:?} -> {:?}", op, e
                ),
            }
        }
    }
}

fn cell() -> impl Strategy<Value = Cell> {
    prop_oneof![
        Just(Cell::Null),
        (-3i64..3).prop_map(Cell::Int),
        "[a-z]{0,3}".prop_map(Cell::Text),
    ]
}

proptest! {
    /// Any stored row decodes to a record or a typed row error, never a panic; and a decoded
    /// record re-encodes to the same cells.
    #[test]
    fn arbitrary_rows_decode_or_fail_typed(
        base in proptest::collection::vec(cell(), COLUMNS.len()),
        extra in proptest::collection::vec(cell(), 0..3),
        cut in 0usize..2,
    ) {
        let mut cells = base;
        cells.extend(extra.iter().cloned());
        cells.truncate(cells.len().saturating_sub(cut));
        if let Ok(rec) = ActivityRecord::from_cells(&cells) {
            prop_assert_eq!(rec.to_cells(), cells);
        }
        // A valid row with one cell replaced still decodes or fails typed.
        let mut valid = admitted(&admission("w", "k", "a"), 0).to_cells();
        for (i, c) in extra.into_iter().enumerate() {
            valid[(i * 17) % COLUMNS.len()] = c;
        }
        if let Ok(rec) = ActivityRecord::from_cells(&valid) {
            prop_assert_eq!(rec.to_cells(), valid);
        }
    }
}

/// An activity refused at admission (`admit_refused`), admitted at 0 on `BOOT`.
fn refused_fixture() -> ActivityRecord {
    let refusal = ResultRef {
        result_ref: "inline:refusal".into(),
        digest: "sha256:refusal".into(),
        media_type: "application/vnd.tether.refusal+json".into(),
        size: 10,
        failed: true,
    };
    admit_refused(None, &admission("w", "k", "a"), &refusal, &at(0))
        .unwrap()
        .0
}

proptest! {
    /// A refused activity is never claimed, bound, given a result or a decision: every
    /// transition with any fence, at any time on any boot, is refused or a no-op, except its
    /// settlement by a later receipt bound to the refusal and, once settled, its compaction.
    #[test]
    fn a_refused_record_only_settles(
        ops in proptest::collection::vec((op(), -2i64..3, 0u32..3, 0i64..1_000_000), 1..40),
    ) {
        let mut rec = refused_fixture();
        for (op, f, boot, ms) in ops {
            let t = Now { boot_id: format!("boot-{boot}"), boot_ms: ms, wall_ms: ms };
            let before = rec.clone();
            let out = match &op {
                Op::Tick(_) | Op::Reboot(_) | Op::WallStep(_) => rebase(&rec, &t),
                Op::Claim(_, l) => claim(&rec, "worker", *l, &t),
                Op::Renew(_, l) => renew(&rec, f, *l, &t),
                Op::Release(_) => release(&rec, f, &t),
                Op::Bind(_) => bind_provider_operation(&rec, f, &operation_id_for("k", "w", "a"), &t),
                Op::Record(_, r) => record_result(&rec, f, &result_ref(&format!("r{r}")), &t),
                Op::Absent(_) => confirm_absent(&rec, f, "guard://g", "sha256:g", &t),
                Op::Unknown(_, b) => record_unknown(&rec, f, "ev://e", "sha256:e", *b, &t),
                Op::Resolve(_, r) => resolve(&rec, &Decision { outcome: DecisionOutcome::Abandon, evidence_revision: *r, operator: "op".into(), note: String::new() }, &t),
                Op::Settle(good) => {
                    let digest = if *good == 1 { settlement_evidence_digest("k", "w", "a", "inline:refusal", "sha256:refusal") } else { "sha256:wrong".into() };
                    let receipt = Receipt { world_id: "w".into(), run_id: "run-1".into(), tick: 9, visibility_token: "t9".into() };
                    settle(&rec, &receipt, &digest, None, &t)
                }
                Op::Compact(d) => compact(&rec, ms + d, &t),
                Op::Readmit(other) => {
                    let mut again = admission("w", "k", "a");
                    if *other == 1 { again.input_digest = "sha256:other".into(); }
                    admit(Some(&rec), &again, &t).map(|(r, how)| {
                        assert_eq!(how, Admitted::Replay);
                        r
                    })
                }
            };
            if let Ok(next) = out {
                let changed = next != before;
                if changed {
                    // Only a settlement, a compaction or a rebase onto another boot (which a
                    // refused record, holding no lease-clock value, only re-stamps).
                    prop_assert!(matches!(op, Op::Settle(1) | Op::Compact(_) | Op::Tick(_) | Op::Reboot(_) | Op::WallStep(_)), "{:?} changed it", op);
                }
                prop_assert!(next.refused_at_admission());
                prop_assert_eq!((next.fence, next.attempt_count), (0, 0));
                prop_assert!(next.attempt.is_none() && next.binding.is_none() && next.decision.is_none());
                prop_assert!(next.claimable_from_ms.is_none());
                prop_assert_eq!(ActivityRecord::from_cells(&next.to_cells()).unwrap(), next.clone());
                rec = next;
            }
        }
    }
}
