"""The `Catalog` API: admission, attempts, filters, bounds, typed errors and the clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether.activities import (
    ABANDONED_MEDIA_TYPE,
    MAX_LEASE_MS,
    MAX_RETRY_AFTER_MS,
    ActivityKey,
    Admission,
    Catalog,
    Evidence,
    ResultRef,
    RetryGuard,
    operation_id_for,
)
from tether.errors import (
    AdmissionConflict,
    BoundsExceeded,
    CatalogConfigError,
    CatalogRejection,
    InvalidRefusal,
    LeaseExpired,
    NotBound,
    NotClaimable,
    NotReconciling,
    OperationBound,
    OperationConflict,
    ReceiptMismatch,
    ReconcileOnly,
    StaleFence,
    TetherError,
    UnknownActivity,
)

from tests.activities.support import (
    ManualClock,
    admission,
    bound_claim,
    evidence_for,
    key,
    receipt,
    result,
)


def test_admission_replay_is_a_no_op_and_a_different_replay_conflicts(catalog: Catalog) -> None:
    k = key()
    first = catalog.admit(admission(k))
    assert first.claimable_from_ms == first.admitted_at_ms and first.version == 1
    assert catalog.admit(admission(k)) == first
    with pytest.raises(AdmissionConflict) as info:
        catalog.admit(admission(k, input_digest="sha256:changed"))
    assert info.value.field == "input_digest" and info.value.code == "admission_conflict"
    with pytest.raises(AdmissionConflict) as info:
        catalog.admit(admission(k, tick=2))  # not a later receipt of the run
    assert info.value.field == "source.tick"
    assert catalog.get(k) == first


def test_the_same_request_from_a_later_receipt_is_the_admitted_activity(catalog: Catalog) -> None:
    """The core decides that a re-request (same key and input, a later tick of the source run)
    is the same Activity: a no-op that keeps the first source binding. A different input, or
    a receipt of another run, is a conflict."""
    k = key()
    first = catalog.admit(admission(k, tick=3))
    assert catalog.admit(admission(k, tick=4)) == first
    assert catalog.admit(admission(k, tick=9)) == first
    with pytest.raises(AdmissionConflict) as info:
        catalog.admit(admission(k, tick=9, input_digest="sha256:changed"))
    assert info.value.field == "input_digest"
    other_run = admission(k, tick=9)
    other_run = Admission(
        k,
        type(other_run.source)(k.world_id, "run-2", 9, "tok-9"),
        other_run.input_ref,
        other_run.input_digest,
    )
    with pytest.raises(AdmissionConflict) as info:
        catalog.admit(other_run)
    assert info.value.field == "source.run_id"
    assert catalog.get(k) == first


def test_source_receipt_must_be_the_activity_world(catalog: Catalog) -> None:
    k = key(world="w1")
    adm = admission(key(world="w2"))
    with pytest.raises(ReceiptMismatch):
        catalog.admit(Admission(k, adm.source, adm.input_ref, adm.input_digest))


def test_field_bounds_are_enforced(catalog: Catalog) -> None:
    with pytest.raises(BoundsExceeded):
        catalog.claim("", 1_000)  # refused even though nothing is claimable
    with pytest.raises(BoundsExceeded):
        catalog.claim("w", 8 * 24 * 3600 * 1000)
    with pytest.raises(BoundsExceeded):
        catalog.admit(admission(key("a" * 513)))
    with pytest.raises(BoundsExceeded):
        catalog.admit(admission(key(kind="k" * 256)))
    big_key = key("a" * 512, kind="k" * 255, world="w" * 512)
    assert catalog.admit(admission(big_key)).key == big_key
    k = key()
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000, world_id="w1")
    assert c is not None
    with pytest.raises(BoundsExceeded):
        catalog.bind_provider_operation(k, c.fence, "o" * 1025)
    catalog.bind_provider_operation(k, c.fence, operation_id_for(k))
    big = result()
    with pytest.raises(BoundsExceeded):
        catalog.record_result(k, c.fence, type(big)("r" * 4097, big.digest, big.media_type, 1))
    with pytest.raises(BoundsExceeded):
        catalog.record_result(k, c.fence, type(big)(big.ref, "d" * 256, big.media_type, 1))
    with pytest.raises(BoundsExceeded):
        catalog.claim("w", 0)
    with pytest.raises(BoundsExceeded):
        catalog.renew(k, c.fence, -5)


def test_renew_extends_and_release_returns_an_unbound_attempt(
    catalog: Catalog, clock: ManualClock
) -> None:
    k = key()
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000)
    assert c is not None
    clock.advance(900)
    rec = catalog.renew(k, c.fence, 1_000)
    assert rec.attempt is not None and rec.attempt.lease_expires_ms == clock.now_ms + 1_000
    assert rec.claimable_from_ms == clock.now_ms + 1_000
    clock.advance(500)
    assert catalog.claim("other", 1_000) is None
    rec = catalog.release(k, c.fence)
    assert rec.attempt is None and rec.claimable_from_ms == clock.now_ms
    with pytest.raises(StaleFence):
        catalog.renew(k, c.fence, 1_000)
    again = catalog.claim("other", 1_000)
    assert again is not None and again.fence == c.fence + 1 and again.attempt.number == 2


def test_renew_after_expiry_is_refused(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000)
    assert c is not None
    clock.advance(1_000)
    with pytest.raises(LeaseExpired):
        catalog.renew(k, c.fence, 1_000)


def test_bound_and_reconcile_attempts_cannot_release(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    c = bound_claim(catalog, k, lease_ms=1_000)
    with pytest.raises(OperationBound):
        catalog.release(k, c.fence)
    clock.advance(1_000)
    r = catalog.claim("w2", 1_000)
    assert r is not None
    with pytest.raises(ReconcileOnly):
        catalog.release(k, r.fence)


def test_a_reconcile_only_attempt_cannot_bind_even_the_bound_id(
    catalog: Catalog, clock: ManualClock
) -> None:
    """A successful bind is an adapter's signal that it may execute: a reconcile-only attempt
    never gets one, not even with the id an earlier attempt already bound."""
    k = key()
    bound_claim(catalog, k, lease_ms=1_000)
    clock.advance(1_000)
    r = catalog.claim("w2", 1_000)
    assert r is not None and not r.attempt.may_execute
    before = catalog.get(k)
    with pytest.raises(ReconcileOnly) as info:
        catalog.bind_provider_operation(k, r.fence, operation_id_for(k))
    assert info.value.code == "reconcile_only"
    assert catalog.get(k) == before


def test_execute_attempts_bind_before_recording(catalog: Catalog) -> None:
    k = key()
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000)
    assert c is not None
    with pytest.raises(NotBound):
        catalog.record_result(k, c.fence, result())
    with pytest.raises(NotReconciling):
        catalog.confirm_absent(k, c.fence, RetryGuard("g", "d"))


def test_operation_identity_is_derived_stable_and_binds_one_activity(catalog: Catalog) -> None:
    k1, k2 = key("a1"), key("a2")
    catalog.admit(admission(k1))
    catalog.admit(admission(k2))
    c1 = catalog.claim("w", 10_000)
    c2 = catalog.claim("w", 10_000)
    assert c1 is not None and c2 is not None and c1.key == k1
    rec = catalog.bind_provider_operation(k1, c1.fence, operation_id_for(k1))
    assert rec.operation_id == operation_id_for(k1) and rec.operation_bound_at_ms is not None
    assert catalog.bind_provider_operation(k1, c1.fence, operation_id_for(k1)) == rec
    with pytest.raises(OperationConflict):
        catalog.bind_provider_operation(k1, c1.fence, "provider-op-2")
    before = catalog.get(k2)
    with pytest.raises(OperationConflict):
        catalog.bind_provider_operation(k2, c2.fence, operation_id_for(k1))
    assert catalog.get(k2) == before


def test_claim_filters_by_kind_and_world_and_takes_the_earliest(
    catalog: Catalog, clock: ManualClock
) -> None:
    order = [key("x", kind="k1"), key("y", kind="k2", world="w2"), key("z", kind="k3")]
    for k in order:
        catalog.admit(admission(k))
        clock.advance(1)
    got = catalog.claim("w", 1_000, kinds=["k3", "k2"])
    assert got is not None and got.key == order[1]
    got = catalog.claim("w", 1_000, world_id="w1", kinds=["k2", "k3"])
    assert got is not None and got.key == order[2]
    assert catalog.claim("w", 1_000, kinds=[]) is None
    assert catalog.claim("w", 1_000, world_id="w2") is None
    got = catalog.claim("w", 1_000)
    assert got is not None and got.key == order[0]
    with pytest.raises(TypeError):
        catalog.claim("w", 1_000, kinds="k1")


def test_reconcile_outcomes_need_the_live_fence(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    c = bound_claim(catalog, k, lease_ms=1_000)
    clock.advance(1_000)
    r = catalog.claim("w2", 1_000)
    assert r is not None
    with pytest.raises(StaleFence):
        catalog.confirm_absent(k, c.fence, RetryGuard("g", "d"))
    with pytest.raises(StaleFence):
        catalog.record_unknown(k, c.fence, Evidence("e", "d"), 0)
    clock.advance(1_000)
    with pytest.raises(LeaseExpired):
        catalog.confirm_absent(k, r.fence, RetryGuard("g", "d"))


def test_a_reconcile_naming_the_evidence_held_keeps_its_revision(
    catalog: Catalog, clock: ManualClock
) -> None:
    """A parked Activity reconciled again with nothing changed names the evidence it holds:
    the revision an operator is deciding on stays; other evidence is a new revision."""
    k = key()
    bound_claim(catalog, k, lease_ms=1_000)
    clock.advance(1_000)  # the bound attempt's lease ran out: the next one reconciles
    c = catalog.claim("w1", 1_000)
    assert c is not None and not c.attempt.may_execute
    first = catalog.record_unknown(k, c.fence, Evidence("ev://1", "sha256:e"), 0)
    assert first.evidence_revision == 1
    again = catalog.claim("w2", 1_000)
    assert again is not None and again.key == k
    same = catalog.record_unknown(k, again.fence, Evidence("ev://1", "sha256:e"), 0)
    assert (same.evidence_revision, same.evidence) == (1, first.evidence)
    third = catalog.claim("w3", 1_000)
    assert third is not None
    other = catalog.record_unknown(k, third.fence, Evidence("ev://2", "sha256:f"), 0)
    assert other.evidence_revision == 2


def test_unknown_activity_and_wrong_argument_types(catalog: Catalog) -> None:
    with pytest.raises(UnknownActivity) as info:
        catalog.renew(key("missing"), 1, 1_000)
    assert isinstance(info.value, CatalogRejection) and isinstance(info.value, TetherError)
    assert catalog.get(key("missing")) is None
    with pytest.raises(TypeError):
        catalog.get(("w", "k", "a"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        catalog.admit({"key": "nope"})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        catalog.claim(42, 1_000)  # type: ignore[arg-type]


def test_has_unsettled_is_world_scoped(catalog: Catalog) -> None:
    assert not catalog.has_unsettled("w1")
    catalog.admit(admission(key(world="w1")))
    assert catalog.has_unsettled("w1") and not catalog.has_unsettled("w2")


def test_the_injected_clock_decides_lease_expiry(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    catalog.admit(admission(k))
    c = catalog.claim("w", 10)
    assert c is not None and c.attempt.lease_expires_ms == clock.now_ms + 10
    clock.now_ms -= 5_000  # a clock that jumps back never revives or steals a lease wrongly
    assert catalog.claim("w2", 10) is None
    clock.now_ms += 5_010
    assert catalog.claim("w2", 10) is not None


def test_records_are_readable_after_reopening(db_url: str, clock: ManualClock) -> None:
    k = ActivityKey("w1", "sim.rollout", "persist")
    with Catalog.open(db_url, clock=clock) as cat:
        cat.admit(admission(k))
        c = cat.claim("w", 1_000)
        assert c is not None
        cat.bind_provider_operation(k, c.fence, operation_id_for(k))
        before = cat.get(k)
    with Catalog.open(db_url, clock=clock) as cat:
        assert cat.get(k) == before


def test_threads_sharing_one_catalog_claim_each_activity_once(db_url: str) -> None:
    import threading

    keys = [key(f"t{i:03d}") for i in range(60)]
    sync = "NORMAL" if db_url.startswith("sqlite:") else "FULL"  # PostgreSQL: always FULL
    with Catalog.open(db_url, synchronous=sync) as cat:
        for k in keys:
            cat.admit(admission(k))
        claimed: list[ActivityKey] = []
        errors: list[BaseException] = []

        def work(name: str) -> None:
            try:
                while (c := cat.claim(name, 60_000)) is not None:
                    cat.bind_provider_operation(c.key, c.fence, operation_id_for(c.key))
                    cat.record_result(c.key, c.fence, result(c.key.activity_id))
                    claimed.append(c.key)
            except BaseException as e:  # surfaced below: a thread must not fail silently
                errors.append(e)

        threads = [threading.Thread(target=work, args=(f"thread-{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors
        assert sorted(claimed, key=lambda k: k.activity_id) == keys
        assert [r.key for r in cat.iter_pending_observation()] == keys


def test_open_passes_the_synchronous_mode_to_the_store(tmp_path: Path) -> None:
    # SQLite only: `synchronous` is SQLite's PRAGMA; a PostgreSQL catalog refuses any mode but
    # FULL (synchronous_commit stays on), see tests/storage/test_pg_store.py.
    from tether.storage import SqliteCatalogStore

    db_url = f"sqlite://{tmp_path / 'catalog.db'}"
    with Catalog.open(db_url, synchronous="NORMAL") as cat:
        assert isinstance(cat.store, SqliteCatalogStore) and cat.store.synchronous == "NORMAL"
    with Catalog.open(db_url) as cat:
        assert isinstance(cat.store, SqliteCatalogStore) and cat.store.synchronous == "FULL"


def test_a_postgres_catalog_refuses_a_lax_synchronous_mode(pg_url: str) -> None:
    with pytest.raises(CatalogConfigError, match="synchronous_commit = on"):
        Catalog.open(pg_url, synchronous="NORMAL")


def test_iter_claimable_merges_kinds_in_claimable_order_across_pages(
    catalog: Catalog, clock: ManualClock
) -> None:
    keys = []
    for step in range(12):
        for kind in ("k-b", "k-a", "k-c")[: 1 + step % 3]:
            k = key(f"x{step:02d}", kind=kind, world=f"w{step % 2}")
            catalog.admit(admission(k))
            keys.append(k)
        if step % 4 != 0:  # several activities share one claimable_from_ms
            clock.advance(1)
    held = catalog.claim("holder", 60_000, kinds=["k-a"])
    assert held is not None
    records = [catalog.get(k) for k in keys]
    expected = sorted(
        (r for r in records if r is not None and r.claimable(clock.now())),
        key=lambda r: (r.claimable_from_ms, r.key.kind, r.key.world_id, r.key.activity_id),
    )
    for size in (1, 2, 5, 100):
        assert [r.key for r in catalog.iter_claimable(page_size=size)] == [r.key for r in expected]
    only = [r.key for r in catalog.iter_claimable(kinds=["k-c", "k-b"], world_id="w1", page_size=2)]
    assert only == [
        r.key for r in expected if r.key.kind in ("k-c", "k-b") and r.key.world_id == "w1"
    ]
    first = catalog.claim("w", 1_000)
    assert first is not None and first.key == expected[0].key


def test_a_targeted_claim_takes_exactly_one_key_or_says_why_not(
    catalog: Catalog, clock: ManualClock
) -> None:
    first, second = key("a1"), key("a2")
    catalog.admit(admission(first))
    catalog.admit(admission(second))
    c = catalog.claim_key(second, "w", 1_000)  # not the earliest: the one asked for
    assert c.key == second and c.fence == 1 and c.attempt.may_execute
    assert c.attempt.lease_expires_ms == clock.now_ms + 1_000
    with pytest.raises(NotClaimable):
        catalog.claim_key(second, "rival", 1_000)  # its lease is live
    with pytest.raises(UnknownActivity):
        catalog.claim_key(key("nope"), "w", 1_000)
    with pytest.raises(BoundsExceeded):
        catalog.claim_key(first, "w", MAX_LEASE_MS + 1)
    before = catalog.get(first)
    with pytest.raises(TypeError):
        catalog.claim_key(first, "w", "1000")  # type: ignore[arg-type]
    assert catalog.get(first) == before
    catalog.bind_provider_operation(second, c.fence, operation_id_for(second))
    catalog.record_result(second, c.fence, result())
    with pytest.raises(NotClaimable):
        catalog.claim_key(second, "w", 1_000)  # a result is recorded
    clock.advance(1_000)
    assert catalog.claim("w", 1_000) is not None  # the other one is still claimable as usual


def test_the_lease_and_backoff_caps_are_seven_days(catalog: Catalog) -> None:
    week = 7 * 24 * 3600 * 1000
    assert MAX_LEASE_MS == MAX_RETRY_AFTER_MS == week
    k = key()
    catalog.admit(admission(k))
    with pytest.raises(BoundsExceeded):
        catalog.claim("w", week + 1)
    c = catalog.claim("w", week)
    assert c is not None
    with pytest.raises(BoundsExceeded):
        catalog.renew(k, c.fence, week + 1)
    assert catalog.renew(k, c.fence, week).attempt is not None


def _refusal(name: str = "too-large") -> ResultRef:
    return ResultRef(
        f"inline:{name}", f"sha256:{name}", "application/vnd.tether.refusal+json", 9, True
    )


def test_a_refused_admission_holds_its_failed_result_and_is_never_claimed(
    catalog: Catalog, clock: ManualClock
) -> None:
    """`admit_refused` persists (on each backend) a record that already holds its failed
    refusal result: no attempt, no operation, never claimable, pending observation; it
    settles against a later receipt like any failed result."""
    k = key()
    rec = catalog.admit_refused(admission(k), _refusal())
    assert rec.refused_at_admission and rec.result == _refusal()
    assert rec.recorded_result is not None
    assert (rec.recorded_result.attempt, rec.recorded_result.fence) == (0, 0)
    assert (rec.attempt_count, rec.fence, rec.attempt, rec.operation_id) == (0, 0, None, None)
    assert rec.claimable_from_ms is None and rec.pending_observation and rec.unsettled
    assert catalog.get(k) == rec
    clock.advance(10_000)
    assert catalog.claim("w", 1000) is None
    assert list(catalog.iter_claimable()) == []
    assert catalog.claimable_in_ms() is None
    with pytest.raises(NotClaimable):
        catalog.claim_key(k, "w", 1000)
    for fence in (0, 1):
        with pytest.raises(CatalogRejection):
            catalog.bind_provider_operation(k, fence, operation_id_for(k))
        with pytest.raises(CatalogRejection):
            catalog.record_result(k, fence, result())
    assert [r.key for r in catalog.iter_pending_observation()] == [k]
    assert catalog.has_unsettled(k.world_id)
    settled = catalog.settle(k, receipt(4, world=k.world_id), evidence_for(k, _refusal()))
    assert settled.settlement is not None and settled.refused_at_admission
    assert not catalog.has_unsettled(k.world_id)
    assert catalog.compact_settled(0) == 1
    compacted = catalog.get(k)
    assert compacted is not None and compacted.compacted and compacted.refused_at_admission


def test_a_refused_admission_replays_like_admit_and_never_rewrites_a_record(
    catalog: Catalog,
) -> None:
    k = key()
    first = catalog.admit_refused(admission(k), _refusal())
    # Identical replay, a later re-request, another refusal, a plain admission: no-ops.
    assert catalog.admit_refused(admission(k), _refusal()) == first
    assert catalog.admit_refused(admission(k, tick=7), _refusal()) == first
    assert catalog.admit_refused(admission(k), _refusal("other")) == first
    assert catalog.admit(admission(k)) == first
    with pytest.raises(AdmissionConflict) as info:
        catalog.admit_refused(admission(k, input_digest="sha256:changed"), _refusal())
    assert info.value.field == "input_digest"
    # A normally admitted Activity under the key stays as it is (claimable).
    plain_key = key("a2")
    plain = catalog.admit(admission(plain_key))
    assert catalog.admit_refused(admission(plain_key), _refusal()) == plain
    assert catalog.get(plain_key) == plain and not plain.refused_at_admission
    assert catalog.get(k) == first


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (ResultRef("inline:x", "sha256:x", "application/json", 1, False), "refusal.failed"),
        (
            ResultRef("tether:abandoned/1", "sha256:x", ABANDONED_MEDIA_TYPE, 0, True),
            "refusal.media_type",
        ),
        (ResultRef("", "sha256:x", "application/json", 1, True), "result.ref"),
    ],
)
def test_a_refusal_that_is_not_a_failed_document_is_refused(
    catalog: Catalog, bad: ResultRef, field: str
) -> None:
    k = key()
    with pytest.raises(CatalogRejection) as info:
        catalog.admit_refused(admission(k), bad)
    assert info.value.field == field
    if field.startswith("refusal."):
        assert isinstance(info.value, InvalidRefusal) and info.value.code == "invalid_refusal"
    assert catalog.get(k) is None  # nothing was written
    with pytest.raises(TypeError):
        catalog.admit_refused(admission(k), "inline:x")  # type: ignore[arg-type]
