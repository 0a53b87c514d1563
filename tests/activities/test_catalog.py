"""The `Catalog` API: admission, attempts, filters, bounds, typed errors and the clock."""

from __future__ import annotations

import pytest
from tether.activities import (
    ActivityKey,
    Admission,
    Catalog,
    Evidence,
    RetryGuard,
    operation_id_for,
)
from tether.errors import (
    AdmissionConflict,
    BoundsExceeded,
    CatalogRejection,
    LeaseExpired,
    NotBound,
    NotReconciling,
    OperationBound,
    OperationConflict,
    ReceiptMismatch,
    ReconcileOnly,
    StaleFence,
    TetherError,
    UnknownActivity,
)

from tests.activities.support import ManualClock, admission, key, result


def test_admission_replay_is_a_no_op_and_a_different_replay_conflicts(catalog: Catalog) -> None:
    k = key()
    first = catalog.admit(admission(k))
    assert first.claimable_from_ms == first.admitted_at_ms and first.version == 1
    assert catalog.admit(admission(k)) == first
    with pytest.raises(AdmissionConflict) as info:
        catalog.admit(admission(k, input_digest="sha256:changed"))
    assert info.value.field == "input_digest" and info.value.code == "admission_conflict"
    with pytest.raises(AdmissionConflict):
        catalog.admit(admission(k, tick=4))
    assert catalog.get(k) == first


def test_source_receipt_must_be_the_activity_world(catalog: Catalog) -> None:
    k = key(world="w1")
    adm = admission(key(world="w2"))
    with pytest.raises(ReceiptMismatch):
        catalog.admit(Admission(k, adm.source, adm.input_ref, adm.input_digest))


def test_field_bounds_are_enforced(catalog: Catalog) -> None:
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
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000)
    assert c is not None
    catalog.bind_provider_operation(k, c.fence, operation_id_for(k))
    with pytest.raises(OperationBound):
        catalog.release(k, c.fence)
    clock.advance(1_000)
    r = catalog.claim("w2", 1_000)
    assert r is not None
    with pytest.raises(ReconcileOnly):
        catalog.release(k, r.fence)


def test_execute_attempts_bind_before_recording(catalog: Catalog) -> None:
    k = key()
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000)
    assert c is not None
    with pytest.raises(NotBound):
        catalog.record_result(k, c.fence, result())
    with pytest.raises(NotReconciling):
        catalog.confirm_absent(k, c.fence, RetryGuard("g", "d"))


def test_operation_identity_is_stable_and_binds_one_activity(catalog: Catalog) -> None:
    k1, k2 = key("a1"), key("a2")
    catalog.admit(admission(k1))
    catalog.admit(admission(k2))
    c1 = catalog.claim("w", 10_000)
    c2 = catalog.claim("w", 10_000)
    assert c1 is not None and c2 is not None and c1.key == k1
    catalog.bind_provider_operation(k1, c1.fence, "provider-op-1")
    assert catalog.bind_provider_operation(k1, c1.fence, "provider-op-1").operation_id == (
        "provider-op-1"
    )
    with pytest.raises(OperationConflict):
        catalog.bind_provider_operation(k1, c1.fence, "provider-op-2")
    before = catalog.get(k2)
    with pytest.raises(OperationConflict):
        catalog.bind_provider_operation(k2, c2.fence, "provider-op-1")
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
    catalog.admit(admission(k))
    c = catalog.claim("w", 1_000)
    assert c is not None
    catalog.bind_provider_operation(k, c.fence, operation_id_for(k))
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
