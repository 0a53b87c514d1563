"""One test per catalog gate of the Activities seed, section 7."""

from __future__ import annotations

import pytest
from tether.activities import Catalog, RetryGuard, operation_id_for
from tether.errors import (
    EvidenceMismatch,
    LeaseExpired,
    ReceiptMismatch,
    ResultConflict,
    SettlementConflict,
    StaleFence,
    TokenlessReceipt,
)

from tests.activities.support import (
    ManualClock,
    admission,
    bound_claim,
    evidence_for,
    key,
    receipt,
    reconciling,
    result,
)
from tests.backends import SLOW_ON_POSTGRES, fresh_catalog_url


def test_equal_activity_ids_in_two_worlds_are_isolated(catalog: Catalog) -> None:
    k1, k2 = key("same", world="w1"), key("same", world="w2")
    catalog.admit(admission(k1))
    catalog.admit(admission(k2, input_digest="sha256:other"))  # no conflict: another world
    assert operation_id_for(k1) != operation_id_for(k2)
    c = catalog.claim("worker", 10_000, world_id="w1")
    assert c is not None and c.key == k1
    catalog.bind_provider_operation(k1, c.fence, operation_id_for(k1))
    catalog.record_result(k1, c.fence, result())
    other = catalog.get(k2)
    assert other is not None
    assert other.result is None and other.operation_id is None and other.fence == 0
    assert catalog.has_unsettled("w2")


def test_equal_activity_ids_of_two_kinds_in_one_world_are_isolated(catalog: Catalog) -> None:
    k1, k2 = key("same", kind="sim.rollout"), key("same", kind="robot.move")
    catalog.admit(admission(k1))
    catalog.admit(admission(k2, input_digest="sha256:other"))
    assert operation_id_for(k1) != operation_id_for(k2)
    c = catalog.claim("worker", 10_000, kinds=["robot.move"])
    assert c is not None and c.key == k2
    catalog.bind_provider_operation(k2, c.fence, operation_id_for(k2))
    rec1 = catalog.get(k1)
    assert rec1 is not None and rec1.attempt is None and rec1.operation_id is None


def _expired_and_reclaimed(catalog: Catalog, clock: ManualClock) -> tuple[int, int]:
    first, second = reconciling(catalog, clock, key())
    return first.fence, second.fence


def test_stale_fence_cannot_bind(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    catalog.admit(admission(k))
    first = catalog.claim("w-old", 1_000)
    assert first is not None
    clock.advance(1_000)
    second = catalog.claim("w-new", 1_000)
    assert second is not None and second.fence > first.fence
    before = catalog.get(k)
    with pytest.raises(StaleFence):
        catalog.bind_provider_operation(k, first.fence, operation_id_for(k))
    assert catalog.get(k) == before


def test_stale_fence_cannot_record_a_result(catalog: Catalog, clock: ManualClock) -> None:
    old, new = _expired_and_reclaimed(catalog, clock)
    k = key()
    before = catalog.get(k)
    with pytest.raises(StaleFence):
        catalog.record_result(k, old, result())
    assert catalog.get(k) == before
    catalog.record_result(k, new, result())  # the live reconcile fence may


def test_expired_lease_cannot_record_a_result(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    c = bound_claim(catalog, k, lease_ms=1_000)
    clock.advance(1_000)
    with pytest.raises(LeaseExpired):
        catalog.record_result(k, c.fence, result())


def test_stale_fence_cannot_settle(catalog: Catalog, clock: ManualClock) -> None:
    old, new = _expired_and_reclaimed(catalog, clock)
    k = key()
    res = result()
    catalog.record_result(k, new, res)
    with pytest.raises(StaleFence):
        catalog.settle(k, receipt(5), evidence_for(k, res), fence=old)
    rec = catalog.settle(k, receipt(5), evidence_for(k, res), fence=new)
    assert rec.settlement is not None


def test_reconcile_only_after_a_bound_attempt_expires(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    catalog.admit(admission(k))
    first = catalog.claim("w-old", 1_000)
    assert first is not None and first.attempt.may_execute
    catalog.bind_provider_operation(k, first.fence, operation_id_for(k))
    clock.advance(999)
    assert catalog.claim("w-new", 1_000) is None, "a live lease is never claimed"
    clock.advance(1)
    second = catalog.claim("w-new", 1_000)
    assert second is not None and not second.attempt.may_execute
    # Again after that one expires: still reconcile-only, never blind replay.
    clock.advance(1_000)
    third = catalog.claim("w-third", 1_000)
    assert third is not None and not third.attempt.may_execute


def test_unbound_expired_attempt_may_execute_again(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    catalog.admit(admission(k))
    first = catalog.claim("w-old", 1_000)
    assert first is not None
    clock.advance(1_000)
    second = catalog.claim("w-new", 1_000)
    assert second is not None and second.attempt.may_execute


def test_fresh_execution_only_after_confirmed_absence_with_guard(
    catalog: Catalog, clock: ManualClock
) -> None:
    k = key()
    _, reconcile = _expired_and_reclaimed(catalog, clock)
    rec = catalog.confirm_absent(k, reconcile, RetryGuard("provider://dedup/1", "sha256:g"))
    assert rec.retry_guard is not None and rec.retry_guard.authorizes_execution
    assert rec.retry_guard.fence == reconcile
    fresh = catalog.claim("w-exec", 1_000)
    assert fresh is not None and fresh.attempt.may_execute
    assert fresh.record.retry_guard is not None
    assert not fresh.record.retry_guard.authorizes_execution, "one guard, one execution"
    # The same stable operation id is re-bound (a no-op); a new one cannot be.
    catalog.bind_provider_operation(k, fresh.fence, operation_id_for(k))
    clock.advance(1_000)
    after = catalog.claim("w-after", 1_000)
    assert after is not None and not after.attempt.may_execute


def test_exact_duplicate_result_is_a_no_op_and_a_different_result_conflicts(
    catalog: Catalog, clock: ManualClock
) -> None:
    k = key()
    c = bound_claim(catalog, k)
    first = catalog.record_result(k, c.fence, result("r1"))
    again = catalog.record_result(k, c.fence, result("r1"))
    assert again == first
    with pytest.raises(ResultConflict):
        catalog.record_result(k, c.fence, result("r2"))
    assert catalog.get(k) == first
    clock.advance(10**9)  # long after any lease: a recorded result is never claimed again
    assert catalog.claim("late", 1_000) is None and list(catalog.iter_claimable()) == []


def test_exact_duplicate_settlement_is_a_no_op_and_a_different_one_conflicts(
    catalog: Catalog,
) -> None:
    k = key()
    c = bound_claim(catalog, k)
    res = result()
    catalog.record_result(k, c.fence, res)
    settled = catalog.settle(k, receipt(7), evidence_for(k, res))
    assert catalog.settle(k, receipt(7), evidence_for(k, res)) == settled
    with pytest.raises(SettlementConflict):
        catalog.settle(k, receipt(8), evidence_for(k, res))
    assert catalog.get(k) == settled


def test_settlement_needs_the_exact_later_receipt_and_matching_evidence(catalog: Catalog) -> None:
    k = key()
    c = bound_claim(catalog, k)  # admitted at tick 3
    res = result()
    catalog.record_result(k, c.fence, res)
    good = evidence_for(k, res)
    with pytest.raises(ReceiptMismatch):
        catalog.settle(k, receipt(3), good)  # not later than the source tick
    with pytest.raises(ReceiptMismatch):
        catalog.settle(k, receipt(5, run="run-2"), good)
    with pytest.raises(ReceiptMismatch):
        catalog.settle(k, receipt(5, world="w2"), good)
    with pytest.raises(TokenlessReceipt):
        catalog.settle(k, receipt(5, token=""), good)
    with pytest.raises(EvidenceMismatch):
        catalog.settle(k, receipt(5), evidence_for(k, result("other")))
    with pytest.raises(EvidenceMismatch):
        catalog.settle(k, receipt(5), evidence_for(key("a2"), res))
    assert catalog.has_unsettled("w1")
    catalog.settle(k, receipt(5), good)
    assert not catalog.has_unsettled("w1")


def test_tokenless_receipts_cannot_admit(catalog: Catalog) -> None:
    k = key()
    adm = admission(k)
    tokenless = type(adm)(k, receipt(3, token=""), adm.input_ref, adm.input_digest)
    with pytest.raises(TokenlessReceipt):
        catalog.admit(tokenless)
    assert catalog.get(k) is None


#: The leased prefix: 10,000 on SQLite; on PostgreSQL (TETHER_SLOW=1) 2,000, since every step is
#: a durable server transaction (tests/storage/test_pg_store.py pages 50k rows in bulk).
PREFIX = {"sqlite": 10_000, "postgres": 2_000}


@SLOW_ON_POSTGRES
def test_scans_page_past_a_long_leased_prefix(
    backend: str, store_url: str, clock: ManualClock
) -> None:
    url = fresh_catalog_url(store_url, "prefix")
    sync = "NORMAL" if backend == "sqlite" else "FULL"  # PostgreSQL commits are always durable
    with Catalog.open(url, clock=clock, synchronous=sync) as cat:
        n = PREFIX[backend]
        leased = [key(f"a{i:05d}") for i in range(n)]
        for k in leased:
            cat.admit(admission(k))
        clock.advance(1)
        for _ in leased:
            assert cat.claim("holder", 3_600_000) is not None
        late = key("z-late")
        cat.admit(admission(late))
        assert [r.key for r in cat.iter_claimable(page_size=7)] == [late]
        c = cat.claim("w", 1_000)
        assert c is not None and c.key == late
        # Results pending observation: all n/5 are found, page after page, in key order.
        for k in leased[: n // 5]:
            rec = cat.get(k)
            assert rec is not None
            cat.bind_provider_operation(k, rec.fence, operation_id_for(k))
            cat.record_result(k, rec.fence, result(k.activity_id))
        pending = [r.key for r in cat.iter_pending_observation(page_size=33)]
        assert pending == leased[: n // 5]
        assert [r.key for r in cat.iter_pending_observation(kinds=["other"])] == []
        # A settled prefix of any length hides no unobserved result either.
        for k in leased[: n * 3 // 20]:
            cat.settle(k, receipt(9), evidence_for(k, result(k.activity_id)))
        pending = [r.key for r in cat.iter_pending_observation(world_id="w1", page_size=33)]
        assert pending == leased[n * 3 // 20 : n // 5]
        assert cat.has_unsettled("w1")
