"""Retention: `Catalog.compact_settled` compacts settled records older than a limit, and only
those; a compacted key is never admitted again; settlements survive; scans still page."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tether.activities import (
    ActivityKey,
    Admission,
    Catalog,
    Decision,
    Evidence,
    RetryGuard,
    operation_id_for,
)
from tether.errors import (
    AdmissionConflict,
    Compacted,
    NotCompactable,
    SettlementConflict,
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
from tests.backends import catalog_url_for

REPO = Path(__file__).resolve().parents[2]
DAY_MS = 24 * 3600 * 1000


def settle_one(cat: Catalog, k: ActivityKey, *, tick: int = 9) -> None:
    """The whole lifecycle: admit, claim, bind, record a result, settle at ``tick``."""
    c = bound_claim(cat, k)
    res = result(k.activity_id)
    cat.record_result(k, c.fence, res)
    cat.settle(k, receipt(tick, world=k.world_id), evidence_for(k, res))


def unsettled_zoo(cat: Catalog, clock: ManualClock) -> list[ActivityKey]:
    """One record in every unsettled state: admitted, leased, bound, with a result pending
    observation, awaiting a decision, reconcile-only, confirmed absent."""
    # One kind each, so each claim below can only take its own record.
    admitted, leased, bound, pending, parked, rec, absent = (
        key(n, kind=f"zoo.{n}")
        for n in ("admitted", "leased", "bound", "pending", "parked", "reconciling", "absent")
    )
    cat.admit(admission(admitted))
    cat.admit(admission(leased))
    cat.claim_key(leased, "w", 3_600_000)
    bound_claim(cat, bound, lease_ms=3_600_000)
    c = bound_claim(cat, pending)
    cat.record_result(pending, c.fence, result("pending"))
    _, r = reconciling(cat, clock, parked)
    cat.record_unknown(parked, r.fence, Evidence("ev://parked", "sha256:ev"), 3_600_000)
    reconciling(cat, clock, rec)
    _, r = reconciling(cat, clock, absent)
    cat.confirm_absent(absent, r.fence, RetryGuard("guard://absent", "sha256:g"))
    return [admitted, leased, bound, pending, parked, rec, absent]


def test_only_settled_records_older_than_the_limit_are_compacted(
    catalog: Catalog, clock: ManualClock
) -> None:
    old = [key(f"old-{i}") for i in range(3)]
    for k in old:
        settle_one(catalog, k)
    clock.advance(31 * DAY_MS)
    recent = key("recent")
    settle_one(catalog, recent)
    clock.advance(DAY_MS)
    zoo = unsettled_zoo(catalog, clock)
    rows = {k: catalog.store.get((k.world_id, k.kind, k.activity_id)) for k in [recent, *zoo]}
    before = {k: catalog.get(k) for k in old}

    assert [r.key for r in catalog.iter_compactable(30 * DAY_MS)] == old
    assert catalog.compact_settled(30 * DAY_MS) == 3
    for k in old:
        rec, was = catalog.get(k), before[k]
        assert rec is not None and was is not None and rec.compacted
        assert rec.compacted_at_ms == clock.now_ms and rec.compactable_from_ms is None
        # Kept: key, source receipt, input digest, fence, settlement.
        kept = (rec.source, rec.input_digest, rec.fence, rec.attempt_count)
        assert kept == (was.source, was.input_digest, was.fence, was.attempt_count)
        assert rec.settlement == was.settlement and rec.settlement is not None
        # Dropped: references and control state that mattered only until settlement.
        assert rec.input_ref == "" and rec.result is None and rec.operation_id is None
        assert not rec.unsettled and not rec.pending_observation
    # Every unsettled record, and the settled one younger than the limit, is untouched.
    for k, row in rows.items():
        assert catalog.store.get((k.world_id, k.kind, k.activity_id)) == row, k
    assert catalog.compact_settled(30 * DAY_MS) == 0  # nothing left at this limit
    assert catalog.compact_settled(0) == 1  # the recent one, with no limit
    assert catalog.get(recent).compacted  # type: ignore[union-attr]
    for k, row in rows.items():
        if k != recent:
            assert catalog.store.get((k.world_id, k.kind, k.activity_id)) == row, k


def test_the_core_refuses_to_compact_an_unsettled_record_however_it_is_asked(
    catalog: Catalog, clock: ManualClock
) -> None:
    """Even handed an unsettled row directly (not through the index), the core refuses."""
    from tether import _core

    zoo = unsettled_zoo(catalog, clock)
    now = clock.now()
    for k in zoo:
        row = catalog.store.get((k.world_id, k.kind, k.activity_id))
        assert row is not None
        assert not _core.catalog_compactable(row, now.wall_ms + DAY_MS)
        with pytest.raises(NotCompactable) as err:
            _core.catalog_compact(row, now.wall_ms + DAY_MS, now)
        assert err.value.field == "settlement"
    assert catalog.compact_settled(0) == 0
    assert list(catalog.iter_compactable(0)) == []


def test_compaction_and_its_dry_run_page_to_exhaustion(
    catalog: Catalog, clock: ManualClock
) -> None:
    keys = [key(f"s{i:02d}", world=f"w{i % 3}") for i in range(25)]
    for i, k in enumerate(keys):
        settle_one(catalog, k)
        if i % 4 == 0:
            clock.advance(1)  # some share a settlement time, some do not
    assert len(list(catalog.iter_compactable(0, page_size=3))) == 25
    counts: list[int] = []
    assert catalog.compact_settled(0, batch=4, progress=counts.append) == 25
    assert counts[-1] == 25 and counts == sorted(counts) and len(counts) >= 7
    assert all(catalog.get(k).compacted for k in keys)  # type: ignore[union-attr]
    assert list(catalog.iter_compactable(0, page_size=3)) == []


def test_pending_and_claimable_scans_page_to_exhaustion_among_compacted_records(
    catalog: Catalog, clock: ManualClock
) -> None:
    pending, claimable = [], []
    for i in range(12):
        settle_one(catalog, key(f"a-settled-{i:02d}"))
        p, c = key(f"b-pending-{i:02d}"), key(f"c-claimable-{i:02d}")
        claim = bound_claim(catalog, p)
        catalog.record_result(p, claim.fence, result(p.activity_id))
        catalog.admit(admission(c))
        pending.append(p)
        claimable.append(c)
    assert catalog.compact_settled(0, batch=5) == 12
    assert [r.key for r in catalog.iter_pending_observation(page_size=2)] == pending
    assert sorted(r.key.activity_id for r in catalog.iter_claimable(page_size=2)) == [
        k.activity_id for k in claimable
    ]
    assert catalog.has_unsettled("w1")


def test_a_compacted_key_is_never_admitted_again(catalog: Catalog, clock: ManualClock) -> None:
    k = key()
    settle_one(catalog, k)
    catalog.compact_settled(0)
    compacted = catalog.get(k)
    assert compacted is not None and compacted.compacted
    # The same request again, from its source receipt or a later tick: a no-op.
    assert catalog.admit(admission(k)) == compacted
    later = Admission(k, receipt(40), "inline:e30=", "sha256:in")  # a new reference, same input
    assert catalog.admit(later) == compacted
    assert catalog.claim("w", 1_000) is None
    # Another input under the key, or another run: a conflict.
    with pytest.raises(AdmissionConflict) as err:
        catalog.admit(admission(k, tick=40, input_digest="sha256:other"))
    assert err.value.field == "input_digest"
    with pytest.raises(AdmissionConflict):
        catalog.admit(Admission(k, receipt(40, run="run-2"), "input://a1", "sha256:in"))
    assert catalog.get(k) == compacted
    assert not catalog.has_unsettled("w1")


def test_the_settlement_receipt_survives_and_only_its_exact_repeat_is_accepted(
    catalog: Catalog,
) -> None:
    k = key()
    settle_one(catalog, k, tick=9)
    settled = catalog.get(k)
    assert settled is not None and settled.settlement is not None
    catalog.compact_settled(0)
    rec = catalog.get(k)
    assert rec is not None and rec.settlement == settled.settlement
    res = result(k.activity_id)
    assert catalog.settle(k, receipt(9), evidence_for(k, res)) == rec
    with pytest.raises(SettlementConflict):
        catalog.settle(k, receipt(10), evidence_for(k, res))


def test_every_other_transition_refuses_a_compacted_record(catalog: Catalog) -> None:
    k = key()
    settle_one(catalog, k)
    catalog.compact_settled(0)
    rec = catalog.get(k)
    assert rec is not None
    f = rec.fence
    calls = [
        lambda: catalog.claim_key(k, "w", 1_000),
        lambda: catalog.renew(k, f, 1_000),
        lambda: catalog.release(k, f),
        lambda: catalog.bind_provider_operation(k, f, operation_id_for(k)),
        lambda: catalog.record_result(k, f, result("other")),
        lambda: catalog.confirm_absent(k, f, RetryGuard("guard://g", "sha256:g")),
        lambda: catalog.record_unknown(k, f, Evidence("ev://e", "sha256:e"), 0),
        lambda: catalog.resolve(k, Decision.abandon(evidence_revision=0, operator="op")),
    ]
    for call in calls:
        with pytest.raises(Compacted):
            call()
    assert catalog.get(k) == rec


def test_bad_limits_and_batches_are_refused(catalog: Catalog) -> None:
    for bad in (-1, 1.5, "30d", True):
        with pytest.raises((TypeError, ValueError)):
            catalog.compact_settled(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        catalog.compact_settled(0, batch=0)
    with pytest.raises(ValueError):
        list(catalog.iter_compactable(0, page_size=0))


def test_compaction_never_touches_unsettled_records_under_a_concurrent_worker(
    tmp_path: Path, store_url: str
) -> None:
    """A worker process claims, binds, executes and records results for 80 activities while
    this process settles some of them and compacts in small batches: only settled records are
    ever compacted, every result the worker recorded stays, and each effect ran once (on each
    backend: a SQLite file, a PostgreSQL schema)."""
    db, effects, go = catalog_url_for(store_url), tmp_path / "effects.log", tmp_path / "go"
    work = [key(f"work-{i:03d}") for i in range(80)]
    old = [key(f"old-{i:03d}", kind="sim.old") for i in range(40)]
    with Catalog.open(db) as cat:
        for k in old:  # settled before the worker starts; the worker claims none of them
            settle_one(cat, k)
        for k in work:
            cat.admit(admission(k))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.activities.claim_worker",
            db,
            str(effects),
            str(go),
            "proc-a",
            "7",
        ],
        cwd=REPO,
    )
    settled: set[ActivityKey] = set(old)
    compacted = 0
    with Catalog.open(db) as cat:
        deadline = time.monotonic() + 60
        while not Path(f"{go}.proc-a.ready").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        go.touch()
        while proc.poll() is None:
            compacted += cat.compact_settled(0, batch=3)
            # Settle a few of the worker's results while it keeps working.
            for rec in list(cat.iter_pending_observation(page_size=4))[:3]:
                assert rec.result is not None
                cat.settle(rec.key, receipt(9), evidence_for(rec.key, rec.result))
                settled.add(rec.key)
            for k in work:
                rec = cat.get(k)
                assert rec is not None
                assert not rec.compacted or k in settled, f"{k} compacted unsettled"
                assert (rec.input_ref == "") == rec.compacted
        assert proc.wait(timeout=60) == 0
        compacted += cat.compact_settled(0)
        assert compacted == len(settled)
        for k in work:
            rec = cat.get(k)
            assert rec is not None
            if k in settled:
                assert rec.compacted and rec.settlement is not None
            else:
                assert not rec.compacted and rec.input_ref == f"input://{k.activity_id}"
                assert rec.result is not None and rec.result.ref.startswith("effect://")
        assert all(cat.get(k).compacted for k in old)  # type: ignore[union-attr]
    ran = [line.split()[0] for line in effects.read_text().splitlines()]
    assert sorted(ran) == sorted(operation_id_for(k) for k in work)


def test_how_it_ended_survives_compaction(catalog: Catalog) -> None:
    """A failed result's flag is kept (views show a pruned failure as failed, not completed)."""
    from tether.activities import ResultRef
    from tether.live import tool_call_status

    ok, bad = key("ok"), key("bad")
    settle_one(catalog, ok)
    c = bound_claim(catalog, bad)
    failed = ResultRef("artifact://bad", "sha256:bad", "application/json", 1, failed=True)
    catalog.record_result(bad, c.fence, failed)
    catalog.settle(bad, receipt(9), evidence_for(bad, failed))
    assert catalog.compact_settled(0) == 2
    pruned_ok, pruned_bad = catalog.get(ok), catalog.get(bad)
    assert pruned_ok is not None and pruned_bad is not None
    assert pruned_bad.result is None and pruned_bad.result_failed
    assert not pruned_ok.result_failed
    assert (tool_call_status(pruned_ok), tool_call_status(pruned_bad)) == ("completed", "failed")
