//! Attempts: `claim`, `renew`, `release`, `rebase`, and the live-fence check every other
//! transition uses.

use super::admission::check_now;
use super::bounds::{self, MAX_LEASE_MS};
use super::compaction::refuse_compacted;
use super::record::{ActivityRecord, Attempt, Now};
use super::rejection::{Rejection, RejectionKind};

/// The current attempt, if `fence` names it and its lease is live at `now` (a lease of another
/// boot is not). A compacted record has none: `compacted`.
pub(crate) fn live<'a>(
    rec: &'a ActivityRecord,
    fence: i64,
    now: &Now,
) -> Result<&'a Attempt, Rejection> {
    check_now(now)?;
    refuse_compacted(rec)?;
    if fence != rec.fence {
        return Err(Rejection::on(
            RejectionKind::StaleFence,
            "fence",
            format!("fence {fence} is not the current fence {}", rec.fence),
        ));
    }
    let Some(attempt) = rec.attempt.as_ref() else {
        return Err(Rejection::on(
            RejectionKind::StaleFence,
            "fence",
            format!("the attempt under fence {fence} has ended"),
        ));
    };
    if rec.reached(attempt.lease_expires_ms, now) {
        let when = if rec.lease_boot_id == now.boot_id {
            format!("at {}", attempt.lease_expires_ms)
        } else {
            format!("with boot {:?}", rec.lease_boot_id)
        };
        return Err(Rejection::on(
            RejectionKind::LeaseExpired,
            "fence",
            format!("the lease of fence {fence} expired {when}"),
        ));
    }
    Ok(attempt)
}

/// Whether a claim now would be allowed to execute (rather than only reconcile). An activity
/// awaiting a decision is never claimed for execution, whatever else the record says.
pub(crate) fn execution_authorized(rec: &ActivityRecord) -> bool {
    !rec.awaiting_decision
        && (rec.binding.is_none()
            || rec
                .retry_guard
                .as_ref()
                .is_some_and(|g| g.authorizes_execution))
}

/// Checks claim arguments on their own, so a claim with bad arguments is refused even when
/// nothing is claimable; returns the lease expiry (lease clock) a claim at `now` would get.
/// Leases are 1 ms to 7 days (`MAX_LEASE_MS`).
pub fn check_claim(owner: &str, lease_ms: i64, now: &Now) -> Result<i64, Rejection> {
    check_claim_on(owner, None, lease_ms, now)
}

/// `check_claim` for a claim on `host` (None: a claim that names no host).
pub fn check_claim_on(
    owner: &str,
    host: Option<&str>,
    lease_ms: i64,
    now: &Now,
) -> Result<i64, Rejection> {
    check_now(now)?;
    bounds::id("owner", owner)?;
    if let Some(h) = host {
        bounds::id("host", h)?;
    }
    bounds::duration("lease_ms", lease_ms, 1, MAX_LEASE_MS)?;
    bounds::later("lease_ms", now.boot_ms, lease_ms)
}

/// A claim that names no host: `claim_on` with `None`, so it never takes device-bound work.
pub fn claim(
    rec: &ActivityRecord,
    owner: &str,
    lease_ms: i64,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    claim_on(rec, owner, None, lease_ms, now)
}

/// Issues a new attempt under the next fence, for a worker on `host`.
///
/// An activity bound to a host (its admission's `bound_host`, the host that owns the device
/// the work drives) is claimed only on that host: any other host, or a claim naming none, is
/// `wrong_host`. An unbound activity (simulation, remote work) is claimed on any host.
///
/// The attempt may execute only if no provider operation is bound, or if a confirmed absence
/// with a retry guard authorises one fresh execution (the guard is then used up). Otherwise it is
/// reconcile-only. A record is claimable exactly when `claimable_from_ms` is reached on the
/// lease clock (a value of another boot is: that boot's leases are gone with it).
pub fn claim_on(
    rec: &ActivityRecord,
    owner: &str,
    host: Option<&str>,
    lease_ms: i64,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    let lease_expires_ms = check_claim_on(owner, host, lease_ms, now)?;
    refuse_compacted(rec)?;
    let bound = rec.admission.bound_host.as_str();
    if !bound.is_empty() && host != Some(bound) {
        let here = host.map_or("a claim naming no host".to_owned(), |h| {
            format!("host {h:?}")
        });
        return Err(Rejection::on(
            RejectionKind::WrongHost,
            "host",
            format!("the activity's device is on host {bound:?}, not {here}"),
        ));
    }
    // The two "never" rules are checked on the facts themselves, not only through the derived
    // `claimable_from_ms`: a stored row that disagrees with itself fails closed.
    if rec.result.is_some() {
        return Err(Rejection::new(
            RejectionKind::NotClaimable,
            "a result is recorded; the activity is never claimed again",
        ));
    }
    if rec.has_live_attempt(now) {
        return Err(Rejection::new(
            RejectionKind::NotClaimable,
            format!("fence {} holds a live lease", rec.fence),
        ));
    }
    match rec.claimable_from_ms {
        None => {
            return Err(Rejection::new(
                RejectionKind::NotClaimable,
                "a result is recorded; the activity is never claimed again",
            ))
        }
        Some(from) if !rec.reached(from, now) => {
            if rec.awaiting_decision {
                return Err(Rejection::new(
                    RejectionKind::AwaitingDecision,
                    format!("awaiting a decision; reconciliation may resume at {from}"),
                ));
            }
            return Err(Rejection::new(
                RejectionKind::NotClaimable,
                format!("not claimable before {from}"),
            ));
        }
        Some(_) => {}
    }
    let may_execute = execution_authorized(rec);
    let mut next = rec.next(now);
    if may_execute && next.binding.is_some() {
        if let Some(guard) = next.retry_guard.as_mut() {
            guard.authorizes_execution = false;
        }
    }
    next.fence += 1;
    next.attempt_count += 1;
    next.attempt = Some(Attempt {
        number: next.attempt_count,
        owner: owner.to_owned(),
        lease_expires_ms,
        may_execute,
    });
    next.claimable_from_ms = Some(lease_expires_ms);
    Ok(next)
}

/// Extends the live attempt's lease to `now + lease_ms` on the lease clock (at most 7 days).
pub fn renew(
    rec: &ActivityRecord,
    fence: i64,
    lease_ms: i64,
    now: &Now,
) -> Result<ActivityRecord, Rejection> {
    bounds::duration("lease_ms", lease_ms, 1, MAX_LEASE_MS)?;
    let lease_expires_ms = bounds::later("lease_ms", now.boot_ms, lease_ms)?;
    live(rec, fence, now)?;
    let mut next = rec.next(now);
    if let Some(attempt) = next.attempt.as_mut() {
        attempt.lease_expires_ms = lease_expires_ms;
    }
    next.claimable_from_ms = Some(lease_expires_ms);
    Ok(next)
}

/// Brings a record's lease-clock values onto `now`'s boot, as every transition does through
/// `next`: a lease of another boot expires now and a claimable record is claimable now. An
/// up-to-date record comes back unchanged. Storage runs this once per boot over the records that
/// hold lease-clock values, so its claimable index compares values of one clock. A compacted
/// record holds none and comes back unchanged.
pub fn rebase(rec: &ActivityRecord, now: &Now) -> Result<ActivityRecord, Rejection> {
    check_now(now)?;
    if rec.lease_boot_id == now.boot_id || rec.compacted() {
        return Ok(rec.clone());
    }
    Ok(rec.next(now))
}

/// Gives up the live attempt. Only an execute attempt that bound nothing may: once a provider
/// operation is bound, an effect may exist and only reconciliation can say.
pub fn release(rec: &ActivityRecord, fence: i64, now: &Now) -> Result<ActivityRecord, Rejection> {
    let attempt = live(rec, fence, now)?;
    if !attempt.may_execute {
        return Err(Rejection::new(
            RejectionKind::ReconcileOnly,
            "a reconcile-only attempt concludes with a result, an absence or unknown evidence",
        ));
    }
    if let Some(b) = rec.binding.as_ref() {
        return Err(Rejection::new(
            RejectionKind::OperationBound,
            format!(
                "provider operation {} is bound; reconcile instead",
                b.operation_id
            ),
        ));
    }
    let mut next = rec.next(now);
    next.attempt = None;
    next.claimable_from_ms = Some(now.boot_ms);
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::scenario_tests::{admission, admitted, at, bound, BOOT};
    use crate::catalog::{admit, MAX_RETRY_AFTER_MS};

    #[test]
    fn claim_issues_increasing_fences_and_holds_a_lease() {
        let rec = admitted(&admission("w", "k", "a"), 0);
        let c1 = claim(&rec, "w1", 100, &at(0)).unwrap();
        assert_eq!(c1.fence, 1);
        assert!(c1.attempt.as_ref().unwrap().may_execute);
        assert_eq!(c1.claimable_from_ms, Some(100));
        assert_eq!(
            claim(&c1, "w2", 100, &at(50)).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        let c2 = claim(&c1, "w2", 100, &at(100)).unwrap();
        assert_eq!(c2.fence, 2);
        assert_eq!(c2.attempt_count, 2);
        assert!(
            c2.attempt.as_ref().unwrap().may_execute,
            "unbound: may execute again"
        );
    }

    #[test]
    fn renew_and_release_need_the_live_fence() {
        let rec = claim(&admitted(&admission("w", "k", "a"), 0), "w1", 100, &at(0)).unwrap();
        let renewed = renew(&rec, 1, 500, &at(50)).unwrap();
        assert_eq!(renewed.claimable_from_ms, Some(550));
        assert_eq!(
            renew(&rec, 0, 500, &at(50)).unwrap_err().kind,
            RejectionKind::StaleFence
        );
        assert_eq!(
            renew(&rec, 1, 500, &at(100)).unwrap_err().kind,
            RejectionKind::LeaseExpired
        );
        let released = release(&rec, 1, &at(10)).unwrap();
        assert!(released.attempt.is_none());
        assert_eq!(released.claimable_from_ms, Some(10));
        assert_eq!(
            release(&released, 1, &at(10)).unwrap_err().kind,
            RejectionKind::StaleFence
        );
    }

    #[test]
    fn bound_attempts_cannot_release() {
        let rec = bound(0);
        assert_eq!(
            release(&rec, 1, &at(1)).unwrap_err().kind,
            RejectionKind::OperationBound
        );
        let again = claim(&rec, "w2", 100, &at(1000)).unwrap();
        assert!(!again.attempt.as_ref().unwrap().may_execute);
        assert_eq!(
            release(&again, 2, &at(1001)).unwrap_err().kind,
            RejectionKind::ReconcileOnly
        );
    }

    #[test]
    fn a_row_that_disagrees_with_itself_is_never_claimed() {
        // Hand-made inconsistent records: claimable_from_ms says "claimable", the facts say no.
        let leased = claim(&admitted(&admission("w", "k", "a"), 0), "w1", 1_000, &at(0)).unwrap();
        let mut live = leased.clone();
        live.claimable_from_ms = Some(0);
        assert_eq!(
            claim(&live, "w2", 100, &at(10)).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        let mut finished = crate::catalog::record_result(
            &bound(0),
            1,
            &crate::catalog::scenario_tests::result_ref("r"),
            &at(5),
        )
        .unwrap();
        finished.claimable_from_ms = Some(0);
        assert_eq!(
            claim(&finished, "w2", 100, &at(10)).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        let mut waiting = admitted(&admission("w", "k", "a"), 0);
        waiting.awaiting_decision = true;
        let c = claim(&waiting, "w2", 100, &at(10)).unwrap();
        assert!(
            !c.attempt.as_ref().unwrap().may_execute,
            "awaiting a decision: reconcile only"
        );
        // ... and that reconcile-only attempt cannot bind a new provider operation.
        let op = crate::catalog::operation_id_for("k", "w", "a");
        assert_eq!(
            crate::catalog::bind_provider_operation(&c, c.fence, &op, &at(11))
                .unwrap_err()
                .kind,
            RejectionKind::ReconcileOnly
        );
    }

    #[test]
    fn leases_run_on_the_lease_clock_and_wall_steps_decide_nothing() {
        let now = |boot_ms: i64, wall_ms: i64| Now {
            boot_id: BOOT.into(),
            boot_ms,
            wall_ms,
        };
        let rec = admit(None, &admission("w", "k", "a"), &now(0, 1_000_000))
            .unwrap()
            .0;
        assert_eq!(rec.admitted_at_ms, 1_000_000, "record times are wall-clock");
        assert_eq!(
            rec.claimable_from_ms,
            Some(0),
            "claimability is on the lease clock"
        );
        let rec = claim(&rec, "w1", 30_000, &now(0, 1_000_000)).unwrap();
        // The wall clock jumps 31 s ahead, the lease clock moved 1 s: no takeover.
        let ahead = now(1_000, 1_031_000);
        assert_eq!(
            claim(&rec, "w2", 30_000, &ahead).unwrap_err().kind,
            RejectionKind::NotClaimable
        );
        assert!(renew(&rec, 1, 30_000, &ahead).is_ok());
        // The wall clock jumps an hour back, the lease clock passed the expiry: reclaimable.
        let behind = now(30_000, 1_000_000 - 3_600_000);
        assert_eq!(claim(&rec, "w2", 100, &behind).unwrap().fence, 2);
    }

    #[test]
    fn a_lease_of_another_boot_has_expired() {
        let rec = claim(
            &admitted(&admission("w", "k", "a"), 0),
            "w1",
            30_000,
            &at(0),
        )
        .unwrap();
        assert!(rec.has_live_attempt(&at(29_999)));
        let reboot = Now::at("boot-2", 5);
        assert!(!rec.has_live_attempt(&reboot));
        assert!(rec.claimable_at(&reboot));
        assert_eq!(
            renew(&rec, 1, 100, &reboot).unwrap_err().kind,
            RejectionKind::LeaseExpired
        );
        let again = claim(&rec, "w2", 100, &reboot).unwrap();
        assert_eq!(again.lease_boot_id, "boot-2");
        assert_eq!(again.attempt.as_ref().unwrap().lease_expires_ms, 105);
        // `rebase` brings the values onto the new boot: expired now, claimable now.
        let rebased = rebase(&rec, &reboot).unwrap();
        assert_eq!(rebased.version, rec.version + 1);
        assert_eq!(rebased.attempt.as_ref().unwrap().lease_expires_ms, 5);
        assert_eq!(rebased.claimable_from_ms, Some(5));
        assert!(!rebased.has_live_attempt(&reboot));
        assert_eq!(rebase(&rebased, &reboot).unwrap(), rebased);
        // A reconciliation backoff of another boot has passed as well.
        let waiting = crate::catalog::record_unknown(
            &claim(&bound(0), "w2", 100, &at(1_000)).unwrap(),
            2,
            "ev://1",
            "sha256:e",
            MAX_RETRY_AFTER_MS,
            &at(1_010),
        )
        .unwrap();
        assert!(!waiting.claimable_at(&at(1_011)));
        assert!(claim(&waiting, "w3", 100, &Now::at("boot-2", 0)).is_ok());
        // A clock reading must name its boot.
        assert_eq!(
            claim(&rec, "w2", 100, &Now::at("", 0)).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
    }

    #[test]
    fn device_bound_work_is_claimed_only_on_its_host() {
        let mut adm = admission("w", "k", "a");
        adm.bound_host = "arm-host".into();
        let rec = admit(None, &adm, &at(0)).unwrap().0;
        for host in [None, Some("other-host")] {
            let err = claim_on(&rec, "w1", host, 100, &at(0)).unwrap_err();
            assert_eq!(err.kind, RejectionKind::WrongHost);
            assert_eq!(err.field, Some("host"));
        }
        assert_eq!(
            claim(&rec, "w1", 100, &at(0)).unwrap_err().kind,
            RejectionKind::WrongHost
        );
        let c = claim_on(&rec, "w1", Some("arm-host"), 100, &at(0)).unwrap();
        assert_eq!(c.fence, 1);
        // A takeover after the lease runs out is bound to the same host.
        assert_eq!(
            claim_on(&c, "w2", Some("other-host"), 100, &at(200))
                .unwrap_err()
                .kind,
            RejectionKind::WrongHost
        );
        assert_eq!(
            claim_on(&c, "w2", Some("arm-host"), 100, &at(200))
                .unwrap()
                .fence,
            2
        );
        // Unbound work (simulation, remote) is claimed on any host, or by a claim naming none.
        let free = admitted(&admission("w", "k", "b"), 0);
        assert!(claim_on(&free, "w1", Some("other-host"), 100, &at(0)).is_ok());
        assert!(claim(&free, "w1", 100, &at(0)).is_ok());
        // The binding is immutable and survives the row layout.
        assert_eq!(ActivityRecord::from_cells(&c.to_cells()).unwrap(), c);
        let mut moved = adm.clone();
        moved.bound_host = "other-host".into();
        let err = admit(Some(&c), &moved, &at(300)).unwrap_err();
        assert_eq!(err.kind, RejectionKind::AdmissionConflict);
        assert_eq!(err.field, Some("bound_host"));
        assert_eq!(
            claim_on(&free, "w1", Some(""), 100, &at(0))
                .unwrap_err()
                .kind,
            RejectionKind::BoundsExceeded
        );
    }

    #[test]
    fn bounds_are_checked() {
        let rec = admitted(&admission("w", "k", "a"), 0);
        assert_eq!(
            claim(&rec, "", 100, &at(0)).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
        assert_eq!(
            claim(&rec, "w", 0, &at(0)).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
        assert_eq!(
            claim(&rec, "w", MAX_LEASE_MS + 1, &at(0)).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
        assert_eq!(
            claim(&rec, "w", 10, &at(i64::MAX)).unwrap_err().kind,
            RejectionKind::BoundsExceeded
        );
    }
}
