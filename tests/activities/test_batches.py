"""Batched catalog calls on both backends: one transaction for many Activities on PostgreSQL,
every rule still decided by the core per Activity (a refused item keeps its rejection in its
place and changes nothing; the others go through)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import cast

import pytest
from tether.activities import (
    ActivityKey,
    ActivityRecord,
    Catalog,
    ResultRef,
    WorkStep,
    operation_id_for,
)
from tether.errors import (
    AdmissionConflict,
    CatalogRejection,
    LeaseExpired,
    NoResult,
    NotBound,
    StaleFence,
    UnknownActivity,
)

from tests.activities.support import ManualClock, admission, evidence_for, key, receipt, result


def test_a_batch_lifecycle_checks_every_rule_per_activity(
    catalog: Catalog, clock: ManualClock
) -> None:
    keys = [key(f"b{i}") for i in range(5)]
    catalog.admit(admission(keys[0]))
    out = catalog.admit_many(
        [admission(k) for k in keys] + [admission(keys[1], input_digest="sha256:other")]
    )
    assert [getattr(r, "key", None) for r in out[:5]] == keys  # keys[0] a replay
    assert isinstance(out[5], AdmissionConflict)
    assert catalog.get(keys[1]).input_digest == "sha256:in"  # type: ignore[union-attr]

    claims = catalog.claim_many("w", 10_000, 3)
    assert len(claims) == 3 and all(c.attempt.fence == 1 for c in claims)
    rest = catalog.claim_many("w", 10_000, 10)
    assert len(rest) == 2 and catalog.claim_many("w", 10_000, 10) == []
    claims += rest
    ghost = key("ghost")
    stale = (claims[0].key, 0)
    bound = catalog.bind_many([(c.key, c.attempt.fence) for c in claims[1:]] + [stale, (ghost, 1)])
    assert [b.operation_id is not None for b in bound[:4]] == [True] * 4  # type: ignore[union-attr]
    assert isinstance(bound[4], StaleFence) and isinstance(bound[5], UnknownActivity)
    assert catalog.get(claims[0].key).operation_id is None  # type: ignore[union-attr]

    recorded = catalog.record_results(
        [(c.key, c.attempt.fence, result(c.key.activity_id)) for c in claims]
    )
    assert isinstance(recorded[0], NotBound)  # never bound: no result may be recorded
    assert all(r.result is not None for r in recorded[1:])  # type: ignore[union-attr]
    settled = catalog.settle_many(
        [(c.key, receipt(9), evidence_for(c.key, result(c.key.activity_id))) for c in claims[1:]]
    )
    assert all(s.settlement is not None for s in settled)  # type: ignore[union-attr]
    assert [k for k in keys if catalog.get(k).settlement] == keys[1:]  # type: ignore[union-attr]


def test_claim_and_bind_binds_each_attempt_it_issues_in_the_claim(
    catalog: Catalog, clock: ManualClock
) -> None:
    keys = [key(f"cb{i}") for i in range(4)]
    catalog.admit_many([admission(k) for k in keys])
    first = catalog.claim_and_bind_many("w", 10_000, 3)
    assert [c.key for c in first] == keys[:3]
    for c in first:
        stored = catalog.get(c.key)
        assert stored is not None and stored.operation_id == operation_id_for(c.key)
        assert c.record.operation_id == operation_id_for(c.key) and c.attempt.fence == 1
    # Bound in the claim: a result may be recorded at once, and a second bind is a replay.
    again = catalog.bind_many([(first[0].key, first[0].attempt.fence)])
    assert getattr(again[0], "operation_id", None) == operation_id_for(first[0].key)
    recorded = catalog.record_results([(first[0].key, 1, result("cb0"))])
    assert getattr(recorded[0], "result", None) is not None
    # A bound attempt whose lease ran out comes back reconcile-only and unbound.
    clock.advance(20_000)
    rest = catalog.claim_and_bind_many("w", 10_000, 10)
    by_key = {c.key: c for c in rest}
    assert set(by_key) == set(keys[1:])
    for k in keys[1:3]:
        assert not by_key[k].attempt.may_execute and by_key[k].attempt.fence == 2
    assert by_key[keys[3]].attempt.may_execute
    assert by_key[keys[3]].record.operation_id == operation_id_for(keys[3])


def test_a_batch_claim_takes_only_the_rows_its_caller_wants(catalog: Catalog) -> None:
    keys = [key(f"t{i}") for i in range(6)]
    catalog.admit_many([admission(k) for k in keys])
    wanted = {keys[0].activity_id, keys[1].activity_id, keys[3].activity_id}
    seen: list[str] = []

    def take(record: ActivityRecord) -> bool:
        assert record.attempt is not None and record.attempt.fence >= 1  # as the core claims it
        seen.append(record.key.activity_id)
        return record.key.activity_id in wanted

    claims = catalog.claim_many("w", 10_000, 10, take=take)
    got = {c.key.activity_id for c in claims}
    assert got == wanted and seen  # a refused row is skipped
    assert keys[2].activity_id not in got
    for k in keys:  # a refused row was left as it was: no attempt, claimable by anyone
        record = catalog.get(k)
        assert record is not None
        assert (record.attempt is not None) == (k.activity_id in got)
    rest = catalog.claim_many("w", 10_000, 10)
    assert {c.key.activity_id for c in rest} == {k.activity_id for k in keys} - got
    assert all(c.attempt.number == 1 for c in rest)  # their first attempt: never released


def test_a_sqlite_batch_claim_is_one_transaction(tmp_path: Path) -> None:
    catalog = Catalog.open(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        keys = [key(f"s{i}") for i in range(5)]
        catalog.admit_many([admission(k) for k in keys])
        store = catalog.store
        before = store.commits  # type: ignore[attr-defined]
        claims = catalog.claim_many("w", 10_000, 10)
        assert len(claims) == 5 and len({c.attempt.fence for c in claims}) == 1
        assert store.commits == before + 1  # type: ignore[attr-defined]
        assert catalog.claim_many("w", 10_000, 10) == []  # each holds a live lease
    finally:
        catalog.close()


def test_a_work_step_settles_records_and_claims_in_one_transaction(
    catalog: Catalog, clock: ManualClock
) -> None:
    keys = [key(f"ws{i}") for i in range(6)]
    catalog.admit_many([admission(k) for k in keys])
    first = catalog.claim_and_bind_many("w", 10_000, 2)
    a, b = first
    catalog.record_results([(a.key, a.fence, result("ws0"))])
    store = catalog.store
    before = store.commits  # type: ignore[attr-defined]
    step = catalog.work_step(
        "w",
        10_000,
        3,
        results=[(b.key, b.fence, result("ws1"))],
        settlements=[(a.key, receipt(9), evidence_for(a.key, result("ws0")))],
    )
    assert store.commits == before + 1  # type: ignore[attr-defined]
    settled, recorded = step.settled[0], step.recorded[0]
    assert isinstance(settled, ActivityRecord) and settled.settlement is not None
    assert isinstance(recorded, ActivityRecord) and recorded.result is not None
    assert recorded.result.ref == "artifact://ws1"
    assert [c.key for c in step.claims] == keys[2:5]
    for c in step.claims:  # each bound in the claim, as claim_and_bind_many binds it
        stored = catalog.get(c.key)
        assert stored is not None and stored.operation_id == operation_id_for(c.key)
        assert c.attempt.may_execute and c.fence == 1
    assert catalog.get(a.key).settlement is not None  # type: ignore[union-attr]
    assert catalog.get(b.key).result is not None  # type: ignore[union-attr]
    # Nothing to hand in and nothing to claim: no transaction at all.
    assert catalog.work_step("w", 10_000, 0) == WorkStep((), 0, ())
    assert store.commits == before + 1  # type: ignore[attr-defined]


def test_a_refused_item_of_a_work_step_changes_nothing_and_blocks_nothing(
    catalog: Catalog, clock: ManualClock
) -> None:
    keys = [key(f"wr{i}") for i in range(4)]
    catalog.admit_many([admission(k) for k in keys])
    a, b = catalog.claim_and_bind_many("w", 10_000, 2)
    ghost = key("ghost")
    step = catalog.work_step(
        "w",
        10_000,
        5,
        results=[(a.key, a.fence + 1, result("wr0")), (b.key, b.fence, result("wr1"))],
        settlements=[(ghost, receipt(9), "sha256:x"), (b.key, receipt(9), "sha256:x")],
    )
    assert isinstance(step.settled[0], UnknownActivity)
    assert isinstance(step.settled[1], NoResult)  # settled before its result is recorded
    assert isinstance(step.recorded[0], StaleFence)
    assert getattr(step.recorded[1], "result", None) is not None
    assert step.refused == (step.settled[0], step.settled[1], step.recorded[0])
    assert [c.key for c in step.claims] == keys[2:]
    assert catalog.get(a.key).result is None  # type: ignore[union-attr]
    assert catalog.get(b.key).settlement is None  # type: ignore[union-attr]


def test_a_work_step_leaves_its_own_items_unclaimed(catalog: Catalog, clock: ManualClock) -> None:
    k = key("wl0")
    catalog.admit(admission(k))
    (old,) = catalog.claim_and_bind_many("w", 1_000, 1)
    clock.advance(2_000)  # the lease ran out: the Activity is claimable (to reconcile)
    step = catalog.work_step("w", 1_000, 5, results=[(k, old.fence, result("late"))])
    assert isinstance(step.recorded[0], LeaseExpired)  # as record_results refuses it
    assert step.claims == ()  # an item's row waits for the next claim
    (again,) = catalog.claim_and_bind_many("w", 1_000, 5)
    assert again.key == k and not again.attempt.may_execute and again.fence == old.fence + 1


def test_work_steps_end_where_the_one_by_one_calls_end(db_url: str, tmp_path: Path) -> None:
    """A random workload driven by work steps and by the separate batch calls, on one clock,
    leaves the same records (every field), so the step decides nothing of its own."""
    rng = random.Random(7)
    second = f"sqlite:///{tmp_path / 'one-by-one.db'}"
    clock = ManualClock()
    stepped, separate = Catalog.open(db_url, clock=clock), Catalog.open(second, clock=clock)
    try:
        keys = [key(f"eq{i:02d}") for i in range(30)]
        for cat in (stepped, separate):
            cat.admit_many([admission(k) for k in keys])
        held: list[tuple[ActivityKey, int]] = []  # executed, result not yet recorded
        recorded: list[ActivityKey] = []  # recorded, not yet settled
        for _ in range(12):
            results = [(k, f, result(k.activity_id)) for k, f in held if rng.random() < 0.8]
            if rng.random() < 0.2 and held:  # a stale fence among them
                k, f = held[0]
                results.append((k, f + 1, result("stale")))
            settle = [
                (k, receipt(9), evidence_for(k, result(k.activity_id)))
                for k in recorded
                if rng.random() < 0.7
            ]
            limit = rng.randrange(0, 5)
            step = stepped.work_step("w", 5_000, limit, results=results, settlements=settle)
            alone_settled = separate.settle_many(settle) if settle else []
            alone_recorded = separate.record_results(results) if results else []
            alone_claims = separate.claim_and_bind_many("w", 5_000, limit) if limit else []
            for got, want in zip(
                (*step.settled, *step.recorded),
                (*alone_settled, *alone_recorded),
                strict=True,
            ):
                assert type(got) is type(want)
            assert [c.key for c in step.claims] == [c.key for c in alone_claims]
            done = {
                k
                for (k, _, _), r in zip(results, step.recorded, strict=True)
                if isinstance(r, ActivityRecord)
            }
            recorded = [k for k in recorded if k not in {s[0] for s in settle}]
            recorded += [r.key for r in step.recorded if isinstance(r, ActivityRecord)]
            held = [(k, f) for k, f in held if k not in done and k not in set(recorded)]
            held += [(c.key, c.fence) for c in step.claims]
            clock.advance(rng.choice([10, 100, 6_000]))  # sometimes past every lease
        for k in keys:
            assert stepped.get(k) == separate.get(k)
    finally:
        stepped.close()
        separate.close()


def test_a_work_step_item_that_is_no_core_rejection_writes_nothing(
    catalog: Catalog, clock: ManualClock
) -> None:
    """An item that fails for another reason than the core's rule (here, a result that is
    no ResultRef) aborts the whole step: no item is written and nothing is claimed."""
    keys = [key(f"wx{i}") for i in range(3)]
    catalog.admit_many([admission(k) for k in keys])
    (a,) = catalog.claim_and_bind_many("w", 10_000, 1)
    before = {k: catalog.get(k) for k in keys}
    bad = cast(ResultRef, "not a result reference")
    with pytest.raises(Exception) as info:
        catalog.work_step("w", 10_000, 5, results=[(a.key, a.fence, bad)])
    assert not isinstance(info.value, CatalogRejection)
    assert {k: catalog.get(k) for k in keys} == before
