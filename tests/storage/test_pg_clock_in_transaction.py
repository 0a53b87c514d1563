"""A PostgreSQL catalog on its server clock reads that clock inside each transaction (one
statement with the rows it reads, or the claim itself) and sends each transaction in two round
trips. These tests run the catalog on that path (the default clock of `Catalog.open`; the
other PostgreSQL tests mostly set a `ManualClock`, which is read before the transaction): the
core still decides every rule per Activity, a batch's write is guarded per row, and a lost
COMMIT is still an unknown outcome that the re-read settles."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from pgproxy import CommitCutter
from tether import _core
from tether.activities import (
    ActivityKey,
    ActivityRecord,
    Admission,
    Catalog,
    Now,
    operation_id_for,
)
from tether.errors import (
    AdmissionConflict,
    CatalogStorageError,
    LeaseExpired,
    NoResult,
    NotBound,
    NotClaimable,
    ResultConflict,
    StaleFence,
    UnknownActivity,
)
from tether.storage import CommitUnknown
from tether.storage._postgres import (
    _TYPES,
    _UNSTAMPED,
    ANNOUNCED_FRESH_S,
    ANNOUNCED_MAX_AGE_MS,
    COLUMNS,
    PostgresCatalogStore,
    PostgresClock,
)

from tests.activities.support import admission, evidence_for, key, receipt, result


def _core_result_step(k: ActivityKey, fence: int) -> Any:
    """The core's record_result of ``k`` at ``fence`` (the transition `work_step` runs)."""
    return lambda row, now: _core.catalog_record_result(row, fence, result("m0"), now)


def _core_claim(owner: str, lease_ms: int) -> Any:
    return lambda row, now: _core.catalog_claim(row, owner, lease_ms, now, None)


def _server_clocked(url: str) -> Catalog:
    cat = Catalog.open(url)
    assert isinstance(cat.clock, PostgresClock)
    assert isinstance(cat.store, PostgresCatalogStore) and cat.store.reads_clock(cat.clock)
    return cat


def test_every_rule_is_decided_per_activity_on_the_transactions_own_reading(
    pg_url: str,
) -> None:
    with _server_clocked(pg_url) as cat:
        keys = [key(f"b{i}") for i in range(5)]
        cat.admit(admission(keys[0]))
        out = cat.admit_many(
            [admission(k) for k in keys] + [admission(keys[1], input_digest="sha256:other")]
        )
        assert [getattr(r, "key", None) for r in out[:5]] == keys  # keys[0] a replay
        assert isinstance(out[5], AdmissionConflict)

        claims = cat.claim_many("w", 60_000, 3)
        assert len(claims) == 3 and all(c.attempt.fence == 1 for c in claims)
        claims += cat.claim_many("w", 60_000, 10)
        assert len(claims) == 5 and cat.claim_many("w", 60_000, 10) == []
        assert cat.claim("w", 60_000) is None
        ghost = key("ghost")
        bound = cat.bind_many(
            [(c.key, c.attempt.fence) for c in claims[1:]] + [(claims[0].key, 0), (ghost, 1)]
        )
        assert all(b.operation_id is not None for b in bound[:4])  # type: ignore[union-attr]
        assert isinstance(bound[4], StaleFence) and isinstance(bound[5], UnknownActivity)
        recorded = cat.record_results(
            [(c.key, c.attempt.fence, result(c.key.activity_id)) for c in claims]
        )
        assert isinstance(recorded[0], NotBound)
        assert all(r.result is not None for r in recorded[1:])  # type: ignore[union-attr]
        settled = cat.settle_many(
            [(c.key, receipt(9), evidence_for(c.key, result(c.key.activity_id))) for c in claims]
        )
        assert isinstance(settled[0], NoResult)  # nothing recorded: nothing to settle
        assert all(s.settlement is not None for s in settled[1:])  # type: ignore[union-attr]
        assert [k for k in keys if cat.get(k).settlement] == keys[1:]  # type: ignore[union-attr]
        with pytest.raises(NotClaimable):
            cat.claim_key(keys[1], "w", 60_000)
        with pytest.raises(UnknownActivity):
            cat.claim_key(ghost, "w", 60_000)


def test_leases_run_out_on_the_server_clock_and_the_old_fence_loses(pg_url: str) -> None:
    with _server_clocked(pg_url) as cat:
        k = key("lease")
        before = cat.now()
        cat.admit(admission(k))
        first = cat.claim("old", 1, kinds=[k.kind])
        after = cat.now()
        assert first is not None and first.attempt.fence == 1
        rec = first.record
        assert before.wall_ms <= rec.admitted_at_ms <= after.wall_ms  # the server's reading
        assert rec.attempt is not None
        assert before.boot_ms + 1 <= rec.attempt.lease_expires_ms <= after.boot_ms + 1
        time.sleep(0.05)  # > the 1 ms lease on any resolution of the server's lease clock
        with pytest.raises(LeaseExpired):
            cat.bind_provider_operation(k, first.fence, operation_id_for(k))
        second = cat.claim("new", 60_000, kinds=[k.kind])
        assert second is not None and second.key == k and second.attempt.fence == 2
        out = cat.bind_many([(k, first.fence), (k, second.fence)])
        assert isinstance(out[0], StaleFence)
        assert out[1].operation_id == operation_id_for(k)  # type: ignore[union-attr]


def test_items_of_one_key_in_a_batch_run_in_order(pg_url: str) -> None:
    with _server_clocked(pg_url) as cat:
        k = key("twice")
        out = cat.admit_many([admission(k), admission(k)])
        assert [r.version for r in out] == [1, 1]  # type: ignore[union-attr]
        c = cat.claim("w", 60_000)
        assert c is not None
        bound = cat.bind_many([(k, c.fence), (k, c.fence)])  # the second: the no-op rebind
        assert [b.operation_id for b in bound] == [operation_id_for(k)] * 2  # type: ignore[union-attr]
        assert cat.get(k).version == bound[0].version  # type: ignore[union-attr]


def test_claimants_on_separate_connections_each_take_an_activity_once(pg_url: str) -> None:
    keys = [key(f"p{i:03d}") for i in range(60)]
    with _server_clocked(pg_url) as cat:
        cat.admit_many([admission(k) for k in keys])
    claimed: list[ActivityKey] = []
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            with _server_clocked(pg_url) as mine:
                while claims := mine.claim_many(name, 60_000, 4):
                    out = mine.bind_many([(c.key, c.fence) for c in claims])
                    assert all(not isinstance(b, Exception) for b in out), out
                    claimed.extend(c.key for c in claims)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(f"host-{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert sorted(claimed, key=lambda k: k.activity_id) == keys


def test_a_write_guarded_by_a_stale_version_fails_and_writes_nothing(pg_url: str) -> None:
    """The batch UPDATE guards each row by the version its transition read: one row whose
    stored version is another fails the statement, and the COMMIT behind it does not run."""
    store = PostgresCatalogStore(pg_url)
    try:
        with Catalog(store, clock=lambda: 1_000) as cat:
            a, b = key("a"), key("b")
            cat.admit_many([admission(a), admission(b)])
            old_a = store.get((a.world_id, a.kind, a.activity_id))
            old_b = store.get((b.world_id, b.kind, b.activity_id))
            assert old_a is not None and old_b is not None
            v = COLUMNS.index("version")
            owner = COLUMNS.index("attempt_owner")

            def changed(row: tuple[object, ...]) -> tuple[object, ...]:
                new = list(row)
                new[owner], new[v] = "intruder", int(row[v]) + 1  # type: ignore[call-overload]
                return tuple(new)

            stale_b = (*old_b[:v], int(old_b[v]) - 1, *old_b[v + 1 :])
            writes = store._writes([], [(old_a, changed(old_a)), (stale_b, changed(old_b))], 0)
            with pytest.raises(CatalogStorageError) as info:
                store._session.exchange("guard test", [], lambda _rows: (writes, None), lock=False)
            assert isinstance(info.value.__cause__, psycopg.errors.NotNullViolation)
            assert store.get((a.world_id, a.kind, a.activity_id)) == old_a  # nothing written
            assert store.get((b.world_id, b.kind, b.activity_id)) == old_b
    finally:
        store.close()


def test_the_batch_column_types_are_the_tables(pg_url: str) -> None:
    """Batches cast each JSON position to its column's type: the map is the table's."""
    PostgresCatalogStore(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        types = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = 'activities'"
            ).fetchall()
        )
    assert {c: t for c, t in zip(COLUMNS, _TYPES, strict=True)} == types


@pytest.fixture
def cutter(pg_url: str) -> Iterator[CommitCutter]:
    proxy = CommitCutter(pg_url)
    yield proxy
    proxy.close()


def test_a_lost_reply_of_a_claim_on_the_server_clock_is_unknown_and_reread(
    cutter: CommitCutter,
) -> None:
    with _server_clocked(cutter.url) as cat:
        k = key()
        cat.admit(admission(k))
        assert cat.claim("nobody", 60_000, kinds=["other.kind"]) is None  # aligns the clock
        cutter.arm("drop_reply")
        with pytest.raises(CommitUnknown) as info:
            cat.claim("w", 60_000)
        assert cutter.cuts == 1 and info.value.key == (k.world_id, k.kind, k.activity_id)
        landed = cat.committed(info.value)
        assert landed is not None and landed.attempt is not None and landed.fence == 1
        cutter.arm("drop_commit")
        with pytest.raises(CommitUnknown) as info:
            cat.bind_provider_operation(k, landed.fence, operation_id_for(k))
        assert cat.committed(info.value) is None
        assert cat.get(k).operation_id is None  # type: ignore[union-attr]
        assert cat.bind_provider_operation(k, landed.fence, operation_id_for(k)).operation_id


def test_a_batch_probes_the_primary_key_whatever_the_table_holds(pg_url: str) -> None:
    """The batch read and the batch UPDATE, planned on the store's own session, find their
    rows through the primary key, never by scanning the table (which would grow each
    statement's cost with the table)."""
    from tether.storage._postgres import _READ_MANY, _json

    store = PostgresCatalogStore(pg_url)
    try:
        with Catalog(store, clock=lambda: 1_000) as cat:
            keys = [key(f"k{i:04d}") for i in range(2_000)]
            for i in range(0, len(keys), 500):
                cat.admit_many([admission(k) for k in keys[i : i + 500]])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ANALYZE activities")  # the planner knows the table's 2,000 rows
        rows = [store.get((k.world_id, k.kind, k.activity_id)) for k in keys[:10]]
        assert all(r is not None for r in rows)
        v, owner = COLUMNS.index("version"), COLUMNS.index("attempt_owner")
        update = store._update_sql((owner,))
        batch = _json([(*r[:3], r[v], r[v] + 1, "x") for r in rows])  # type: ignore[index]
        for sql, param in ((_READ_MANY, _json([r[:3] for r in rows])), (update, batch)):  # type: ignore[index]
            plan = "\n".join(
                str(r[0]) for r in store._session.read("plan", "EXPLAIN " + sql, (param,))
            )
            assert "activities_pkey" in plan and "Seq Scan" not in plan, plan
    finally:
        store.close()


def test_a_writer_stopped_inside_its_transaction_blocks_no_other_claimant(pg_url: str) -> None:
    """A write reads its row without locking it and sends its guarded write and COMMIT as one
    message, so a worker stopped while its core decides (a SIGSTOP between the two round
    trips) holds no lock: past the lease, another claimant (`SKIP LOCKED`) takes the row at
    once. Resumed, the stale write fails its version guard, is decided again on the row now
    stored, and the core refuses it; the new attempt is untouched."""
    with _server_clocked(pg_url) as stopped, _server_clocked(pg_url) as other:
        k = key("paused")
        stopped.admit(admission(k))
        first = stopped.claim("w1", 300)
        assert first is not None
        store = stopped.store
        assert isinstance(store, PostgresCatalogStore)
        real = store.apply_at
        inside, resume = threading.Event(), threading.Event()

        def apply_at(key: tuple[str, str, str], step: Any) -> tuple[object, ...]:
            def paused(row: Any, now: Any) -> tuple[object, ...]:
                if not inside.is_set():  # the first decision only, not the retry's
                    inside.set()
                    assert resume.wait(30)
                return step(row, now)  # type: ignore[no-any-return]

            return real(key, paused)

        store.apply_at = apply_at  # type: ignore[method-assign]
        outcome: list[BaseException | None] = []

        def renew() -> None:
            try:
                stopped.renew(k, first.fence, 300)
                outcome.append(None)
            except BaseException as e:
                outcome.append(e)

        t = threading.Thread(target=renew)
        t.start()
        assert inside.wait(30)
        time.sleep(0.5)  # the lease (300 ms) runs out while the renewal is stopped
        t0 = time.monotonic()
        second = other.claim("w2", 60_000)
        assert second is not None and second.fence == first.fence + 1
        assert time.monotonic() - t0 < 2.0  # never waited on the stopped writer
        resume.set()
        t.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], StaleFence | LeaseExpired), outcome
        rec = other.get(k)
        assert rec.fence == second.fence and rec.attempt is not None  # type: ignore[union-attr]
        assert rec.attempt.owner == "w2"  # type: ignore[union-attr]


def _prepared(cat: Catalog) -> set[str]:
    store = cat.store
    assert isinstance(store, PostgresCatalogStore)
    rows = store._session.read("test", "SELECT name FROM pg_prepared_statements")
    return {str(r[0]) for r in rows if str(r[0]).startswith("tether_")}


def test_a_transactions_statements_are_prepared_once_per_connection(pg_url: str) -> None:
    with _server_clocked(pg_url) as cat, psycopg.connect(pg_url, autocommit=True) as admin:
        keys = [key(f"p{i}") for i in range(6)]

        def lifecycle(k: ActivityKey) -> None:
            cat.admit(admission(k))
            (claim,) = cat.claim_and_bind_many("w", 60_000, 1)
            assert claim.key == k and claim.record.operation_id == operation_id_for(k)
            cat.record_result(k, claim.attempt.fence, result(k.activity_id))
            cat.settle(k, receipt(9), evidence_for(k, result(k.activity_id)))

        lifecycle(keys[0])
        first = _prepared(cat)
        assert len(first) >= 4  # the admission, the claim's read and write, result, settle
        lifecycle(keys[1])
        lifecycle(keys[2])
        assert _prepared(cat) == first  # the same statements, executed again
        # A new session has none: they are prepared again on it, under new names.
        store = cat.store
        assert isinstance(store, PostgresCatalogStore)
        admin.execute("SELECT pg_terminate_backend(%s)", (store.backend_pid,))
        lifecycle(keys[3])  # its admission is sent again on a new session (none of it ran)
        again = _prepared(cat)
        assert len(again) >= 4 and not again & first
        lifecycle(keys[4])
        lifecycle(keys[5])
        assert _prepared(cat) == again
        assert all(cat.get(k).settlement is not None for k in keys)  # type: ignore[union-attr]


def test_a_work_step_decides_every_item_and_claim_on_one_reading_in_two_round_trips(
    pg_url: str,
) -> None:
    with _server_clocked(pg_url) as cat:
        keys = [key(f"w{i}") for i in range(5)]
        cat.admit_many([admission(k) for k in keys])
        a, b = cat.claim_and_bind_many("w", 60_000, 2)
        cat.record_results([(a.key, a.fence, result("w0"))])
        store = cat.store
        assert isinstance(store, PostgresCatalogStore)
        before = cat.now()
        commits, trips = store.commits, store.round_trips
        step = cat.work_step(
            "w",
            60_000,
            5,
            results=[(b.key, b.fence, result("w1")), (a.key, a.fence, result("other"))],
            settlements=[(a.key, receipt(9), evidence_for(a.key, result("w0")))],
        )
        assert (store.commits - commits, store.round_trips - trips) == (1, 2)
        after = cat.now()
        assert getattr(step.settled[0], "settlement", None) is not None
        assert getattr(step.recorded[0], "result", None) is not None
        assert isinstance(step.recorded[1], ResultConflict)  # another result, same fence
        assert [c.key for c in step.claims] == keys[2:]
        for c in step.claims:  # the claim's lease and the bind on the one server reading
            assert c.record.operation_id == operation_id_for(c.key)
            assert c.attempt.lease_expires_ms is not None
            assert before.boot_ms + 60_000 <= c.attempt.lease_expires_ms <= after.boot_ms + 60_000
        recorded = step.recorded[0]
        assert isinstance(recorded, ActivityRecord) and recorded.recorded_result is not None
        assert before.wall_ms <= recorded.recorded_result.recorded_at_ms <= after.wall_ms


def test_a_work_step_locks_only_the_rows_it_claims(pg_url: str) -> None:
    """A step's claim walk skips its own items in the statement: with 20 results handed in
    and 10 to claim, it locks 10 claimable rows, not 30, so a claimant on another connection
    takes the rest while the step decides."""
    with _server_clocked(pg_url) as cat, _server_clocked(pg_url) as other:
        keys = [key(f"lk{i:02d}") for i in range(50)]
        cat.admit_many([admission(k) for k in keys])
        held = cat.claim_and_bind_many("w1", 60_000, 20)
        store = cat.store
        assert isinstance(store, PostgresCatalogStore)
        real = store.apply_and_claim_at
        inside, resume = threading.Event(), threading.Event()

        def apply_and_claim_at(items: Any, transition: Any, *args: Any, **kw: Any) -> Any:
            def paused(row: Any, now: Any) -> Any:
                if not inside.is_set():  # while the claim's rows are locked
                    inside.set()
                    assert resume.wait(30)
                return transition(row, now)

            return real(items, paused, *args, **kw)

        store.apply_and_claim_at = apply_and_claim_at  # type: ignore[method-assign]
        got: list[Any] = []
        results = [(c.key, c.fence, result(c.key.activity_id)) for c in held]
        t = threading.Thread(
            target=lambda: got.append(cat.work_step("w1", 60_000, 10, results=results))
        )
        t.start()
        try:
            assert inside.wait(30)
            taken = other.claim_many("w2", 60_000, 30)  # SKIP LOCKED: never waits
        finally:
            resume.set()
            t.join(30)
        (step,) = got
        assert all(isinstance(r, ActivityRecord) for r in step.recorded)
        assert len(step.claims) == 10 and len(taken) == 20
        mine = {c.key for c in step.claims}
        assert not mine & {c.key for c in taken} and not mine & {c.key for c in held}


def test_a_work_step_whose_item_was_written_meanwhile_decides_it_again(pg_url: str) -> None:
    """An item's row is read unlocked and its write guarded by the version read: another
    connection's write in between fails the guard, nothing is written, and the step is
    decided again on the row now stored (its claims too)."""
    with _server_clocked(pg_url) as cat, _server_clocked(pg_url) as other:
        keys = [key(f"m{i}") for i in range(3)]
        cat.admit_many([admission(k) for k in keys])
        (c,) = cat.claim_and_bind_many("w", 60_000, 1)
        store = cat.store
        assert isinstance(store, PostgresCatalogStore)
        seen: list[int] = []
        step = _core_result_step(c.key, c.fence)

        def racing(row: tuple[Any, ...] | None, now: Any) -> tuple[Any, ...]:
            assert row is not None
            seen.append(row[COLUMNS.index("version")])
            if len(seen) == 1:  # a heartbeat lands between the step's read and its write
                other.renew(c.key, c.fence, 60_000)
            return step(row, now)

        claim = _core_claim("w", 60_000)
        outcomes, claimed = store.apply_and_claim_at(
            [((c.key.world_id, c.key.kind, c.key.activity_id), racing)],
            claim,
            lambda _now: None,
            None,
            None,
            5,
            host=None,
            boot_id=cat.now().boot_id,
        )
        assert len(seen) == 2 and seen[1] == seen[0] + 1  # decided again on the renewed row
        assert not isinstance(outcomes[0], Exception)
        assert cat.get(c.key).result is not None  # type: ignore[union-attr]
        assert sorted(r[2] for r in claimed) == ["m1", "m2"]  # claimed once, in the retry


def test_a_lost_reply_of_a_work_step_is_unknown_and_reread(cutter: CommitCutter) -> None:
    with _server_clocked(cutter.url) as cat:
        keys = [key(f"l{i}") for i in range(3)]
        cat.admit_many([admission(k) for k in keys])
        (c,) = cat.claim_and_bind_many("w", 60_000, 1)
        cutter.arm("drop_commit")
        with pytest.raises(CommitUnknown) as info:
            cat.work_step("w", 60_000, 5, results=[(c.key, c.fence, result("l0"))])
        assert info.value.key is None  # a batch: every item is re-read
        assert cat.get(c.key).result is None  # type: ignore[union-attr]
        assert all(cat.get(k).attempt is None for k in keys[1:])  # type: ignore[union-attr]
        cutter.arm("drop_reply")
        with pytest.raises(CommitUnknown):
            cat.work_step("w", 60_000, 5, results=[(c.key, c.fence, result("l0"))])
        assert cat.get(c.key).result is not None  # type: ignore[union-attr]
        assert all(cat.get(k).attempt is not None for k in keys[1:])  # type: ignore[union-attr]
        assert cutter.cuts == 2


def test_a_work_step_decides_on_the_rows_it_last_committed_and_rereads_a_doubtful_one(
    pg_url: str,
) -> None:
    """Items whose rows this store just committed are decided on those rows (no read), each
    write guarded by the version; an item the core would refuse on such a row is decided
    again on the stored row (another connection may have moved it on)."""
    with _server_clocked(pg_url) as cat, _server_clocked(pg_url) as other:
        keys = [key(f"k{i}") for i in range(4)]
        cat.admit_many([admission(k) for k in keys])
        step = cat.work_step("w", 60_000, 2)
        a, b = step.claims
        store = cat.store
        assert isinstance(store, PostgresCatalogStore)
        trips = store.round_trips
        step = cat.work_step("w", 60_000, 0, results=[(a.key, a.fence, result("k0"))])
        assert getattr(step.recorded[0], "result", None) is not None
        assert store.round_trips - trips == 2  # the known row: decided without a read
        # Another connection records b's result: this store's row of b is one version behind.
        other.record_results([(b.key, b.fence, result("k1"))])
        trips = store.round_trips
        step = cat.work_step(
            "w",
            60_000,
            0,
            settlements=[(b.key, receipt(9), evidence_for(b.key, result("k1")))],
        )
        settled = step.settled[0]  # refused (no result) on the stale row: decided again
        assert isinstance(settled, ActivityRecord) and settled.settlement is not None
        assert store.round_trips - trips == 4  # read, rolled back; read again, written


def test_an_admission_is_one_round_trip_stamped_with_the_inserting_statements_reading(
    pg_url: str,
) -> None:
    with _server_clocked(pg_url) as cat:
        store = cat.store
        assert isinstance(store, PostgresCatalogStore)
        k = key("stamped")
        before = cat.now()
        commits, trips = store.commits, store.round_trips
        rec = cat.admit(admission(k))
        assert (store.commits - commits, store.round_trips - trips) == (1, 1)
        after = cat.now()
        assert before.wall_ms <= rec.admitted_at_ms <= after.wall_ms
        assert rec.claimable_from_ms is not None
        assert before.boot_ms <= rec.claimable_from_ms <= after.boot_ms
        assert rec.lease_boot_id == before.boot_id
        # Exactly the core's admit on that reading.
        row = store.get((k.world_id, k.kind, k.activity_id))
        assert row is not None
        stamped = Now(rec.lease_boot_id, rec.claimable_from_ms, rec.admitted_at_ms)
        assert row == _core.catalog_admit(None, admission(k), stamped)
        assert cat.get(k) == rec  # the record returned is the one stored
        # Claimable at once, on the same clock.
        claim = cat.claim("w", 60_000)
        assert claim is not None and claim.key == k


def test_a_stamped_batch_decides_replays_and_conflicts_as_the_core_does(
    pg_url: str, tmp_path: Path
) -> None:
    """Existing records and repeated keys of a batch are decided by the core's admit on the
    stored record (a batch with a stored key is read and decided, not inserted), with the
    outcomes a SQLite catalog gives for the same calls; repeated keys of a new batch on the
    record the batch inserted."""
    sqlite = Catalog.open(f"sqlite:///{tmp_path / 'same.db'}")
    try:
        with _server_clocked(pg_url) as cat:
            a, b, c = key("sa"), key("sb"), key("sc")
            for each in (cat, sqlite):
                each.admit(admission(a))
            batch = [
                admission(a),  # a replay of a stored record
                admission(a, input_digest="sha256:other"),  # a conflict with it
                admission(b),  # new
                admission(b),  # the same again in the batch: a replay of the new one
                admission(c, tick=4),  # new
                admission(c, tick=3, input_digest="sha256:x"),  # a conflict with that one
            ]
            got, want = cat.admit_many(batch), sqlite.admit_many(batch)
            assert [type(r).__name__ for r in got] == [type(r).__name__ for r in want]
            assert [getattr(r, "key", None) for r in got] == [a, None, b, b, c, None]
            assert isinstance(got[1], AdmissionConflict) and isinstance(got[5], AdmissionConflict)
            assert got[2] == got[3] and cat.get(b) == got[2]
            assert cat.get(c).source.tick == 4  # type: ignore[union-attr]
    finally:
        sqlite.close()


def test_a_stamped_admission_racing_another_sessions_decides_on_its_record(pg_url: str) -> None:
    """Another session inserted the record and committed while this admission's insert
    waited on it: the insert fails (nothing written), and the admission is decided on that
    record as stored."""
    with _server_clocked(pg_url) as cat, _server_clocked(pg_url) as other:
        k = key("raced")
        holder = psycopg.connect(pg_url)
        try:
            theirs = other.store
            assert isinstance(theirs, PostgresCatalogStore)
            template = _core.catalog_admission_template(admission(k))
            now = other.now()
            row = list(template)
            for column, part in _core.catalog_admission_stamps():
                row[COLUMNS.index(column)] = getattr(now, part)
            holder.execute(
                f"INSERT INTO activities ({', '.join(COLUMNS)})"
                f" VALUES ({', '.join(['%s'] * len(COLUMNS))})",
                row,
            )  # uncommitted: the admission below waits on its key
            done: list[Any] = []
            t = threading.Thread(target=lambda: done.append(cat.admit(admission(k))))
            t.start()
            time.sleep(0.3)
            assert not done
            holder.commit()
            t.join(30)
            assert len(done) == 1 and done[0].admitted_at_ms == now.wall_ms  # theirs, a replay
        finally:
            holder.close()


def test_a_lost_reply_of_a_stamped_admission_names_no_row_and_admitting_again_settles_it(
    cutter: CommitCutter,
) -> None:
    with _server_clocked(cutter.url) as cat:
        landed, lost = key("landed"), key("lost")
        cutter.arm("drop_reply")
        with pytest.raises(CommitUnknown) as info:
            cat.admit(admission(landed))
        assert info.value.key is None
        again = cat.admit(admission(landed))  # a replay: the first one landed
        assert again.version == 1 and cat.get(landed) == again
        cutter.arm("drop_commit")
        with pytest.raises(CommitUnknown):
            cat.admit(admission(lost))
        assert cat.get(lost) is None  # never landed
        assert cat.admit(admission(lost)).version == 1
        assert cutter.cuts == 2


def test_a_new_batch_with_repeated_keys_is_one_round_trip(pg_url: str) -> None:
    with _server_clocked(pg_url) as cat:
        store = cat.store
        assert isinstance(store, PostgresCatalogStore)
        a, b = key("ra"), key("rb")
        trips = store.round_trips
        out = cat.admit_many(
            [admission(a), admission(b), admission(a), admission(b, input_digest="sha256:o")]
        )
        assert store.round_trips - trips == 1
        assert out[0] == out[2] == cat.get(a) and out[1] == cat.get(b)
        assert isinstance(out[3], AdmissionConflict)


@contextmanager
def _listening(cat: Catalog) -> Iterator[Any]:
    """``cat``'s doorbell, listening while the block runs."""
    bell = cat.doorbell
    bell.listen()
    try:
        yield bell
    finally:
        bell.unlisten()


def _announced(bell: Any, before: int) -> None:
    deadline = time.monotonic() + 10
    while bell.received == before:
        assert time.monotonic() < deadline, "the admission's notification never came"
        time.sleep(0.001)


def test_a_claim_of_an_announced_admission_is_one_round_trip_on_its_reading(pg_url: str) -> None:
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        with _listening(cat) as bell:
            cat.claim("w", 60_000, kinds=["none"])  # aligned to the server's boot
            k = key("announced")
            before = bell.received
            rec = admitting.admit(admission(k))
            _announced(bell, before)
            store = cat.store
            assert isinstance(store, PostgresCatalogStore)
            trips = store.round_trips
            claim = cat.claim("w", 60_000)
            assert store.round_trips - trips == 1  # the one message claimed it
            assert claim is not None and claim.key == k and claim.fence == 1
            # Decided by the core on the admission's reading: the lease runs from it.
            assert rec.claimable_from_ms is not None
            assert claim.attempt.lease_expires_ms == rec.claimable_from_ms + 60_000
            reading = Now(rec.lease_boot_id, rec.claimable_from_ms, rec.admitted_at_ms)
            row = store.get((k.world_id, k.kind, k.activity_id))
            assert row == _core.catalog_claim(
                _core.catalog_admit(None, admission(k), reading), "w", 60_000, reading, None
            )
            assert cat.get(k) == claim.record
            assert cat.claim("other", 60_000) is None  # claimed once


def test_an_announced_admission_behind_an_older_claimable_one_is_claimed_in_order(
    pg_url: str,
) -> None:
    """The one-message claim writes only if the announced record is the first the claim's own
    walk takes: an older claimable record goes first, through the usual claim."""
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        # Keys in admission order: on the kernel clock's 10 ms steps both may share a
        # millisecond, and a tie goes by key.
        older, newer = key("a-older"), key("b-newer")
        admitting.admit(admission(older))  # before anyone listened: never announced
        with _listening(cat) as bell:
            cat.claim("w", 60_000, kinds=["none"])
            before = bell.received
            admitting.admit(admission(newer))
            _announced(bell, before)
            first = cat.claim("w", 60_000)
            assert first is not None and first.key == older
            second = cat.claim("w", 60_000)
            assert second is not None and second.key == newer and second.fence == 1


def test_an_announced_admission_claimed_elsewhere_first_is_not_claimed_again(
    pg_url: str,
) -> None:
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        with _listening(cat) as bell:
            cat.claim("w", 60_000, kinds=["none"])
            k = key("raced-claim")
            before = bell.received
            admitting.admit(admission(k))
            _announced(bell, before)
            theirs = admitting.claim("elsewhere", 60_000)  # another host, first
            assert theirs is not None and theirs.key == k
            assert cat.claim("w", 60_000) is None  # the announcement is stale: nothing written
            rec = cat.get(k)
            assert rec is not None and rec.attempt is not None
            assert rec.attempt.owner == "elsewhere" and rec.fence == 1


def test_a_stale_announcement_is_not_taken(pg_url: str) -> None:
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        with _listening(cat) as bell:
            cat.claim("w", 60_000, kinds=["none"])
            k = key("late")
            before = bell.received
            rec = admitting.admit(admission(k))
            _announced(bell, before)
            time.sleep(ANNOUNCED_FRESH_S * 2)
            store = cat.store
            assert isinstance(store, PostgresCatalogStore)
            trips = store.round_trips
            claim = cat.claim("w", 60_000)
            assert claim is not None and claim.key == k
            assert store.round_trips - trips == 2  # the usual claim, on a fresh reading
            assert rec.claimable_from_ms is not None
            assert claim.attempt.lease_expires_ms > rec.claimable_from_ms + 60_000


def test_a_lost_reply_of_a_claim_of_an_announced_admission_names_its_row(
    cutter: CommitCutter, pg_url: str
) -> None:
    with _server_clocked(pg_url) as admitting, _server_clocked(cutter.url) as cat:
        with _listening(cat) as bell:
            cat.claim("w", 60_000, kinds=["none"])
            k = key("cut-claim")
            before = bell.received
            admitting.admit(admission(k))
            _announced(bell, before)
            cutter.arm("drop_reply")
            with pytest.raises(CommitUnknown) as info:
                cat.claim("w", 60_000)
            assert info.value.key == (k.world_id, k.kind, k.activity_id)
            landed = cat.committed(info.value)
            assert landed is not None and landed.fence == 1 and cutter.cuts == 1


def test_stamped_batches_of_the_same_keys_in_opposite_orders_both_land(pg_url: str) -> None:
    """Two sessions admitting the same new keys in opposite orders: each insert takes its
    keys in key order, so neither waits on the other in a cycle; the one that finds the
    other's records decides on them (replays)."""
    keys = [key(f"o{i}") for i in range(40)]
    errors: list[BaseException] = []
    outs: list[list[Any]] = []

    def admit(order: list[ActivityKey]) -> None:
        try:
            with _server_clocked(pg_url) as cat:
                outs.append(cat.admit_many([admission(k) for k in order]))
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=admit, args=(keys,)),
        threading.Thread(target=admit, args=(keys[::-1],)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(outs) == 2
    for out in outs:
        assert all(isinstance(r, ActivityRecord) for r in out)


def test_an_announcement_too_big_in_bytes_is_not_sent_and_the_admission_lands(
    pg_url: str,
) -> None:
    """The announcement's bound is on bytes: values of many multibyte characters that fit in
    characters but not in bytes are not announced (the NOTIFY carries the topics only)."""
    with _server_clocked(pg_url) as cat:
        wide = "界" * 1_300  # 3,900 bytes each
        batch = [
            Admission(key(f"w{i}"), receipt(3), f"input://{wide}", "sha256:in") for i in range(2)
        ]
        out = cat.admit_many(batch)
        assert all(isinstance(r, ActivityRecord) for r in out)


def _notify(url: str, payload: str) -> None:
    """Send ``payload`` on the catalog's channel from a session of its own (as anyone who
    may connect can)."""
    with psycopg.connect(url, autocommit=True) as conn:
        (channel,) = conn.execute("SELECT 'tether_catalog:' || current_schema()").fetchone()  # type: ignore[misc]
        conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def test_a_forged_announcement_writes_nothing_and_the_claim_goes_the_usual_way(
    pg_url: str,
) -> None:
    """An announcement of a queued record with another input and a reading an hour ahead:
    the one-message claim writes nothing (the stored record is not the announced one), and
    the claim takes the record as stored, on a fresh reading."""
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        k = key("victim")
        rec = admitting.admit(admission(k))  # before anyone listened: never announced
        with _listening(cat) as bell:
            assert cat.claim("w", 60_000, kinds=["none"]) is None  # drained, aligned
            template = list(_core.catalog_admission_template(admission(k)))
            template[COLUMNS.index("input_ref")] = "artifact://forged"
            values = [template[i] for i in _UNSTAMPED]
            assert rec.claimable_from_ms is not None
            ahead = rec.claimable_from_ms + 3_600_000
            before = bell.received
            _notify(
                pg_url,
                f"1|{rec.lease_boot_id}|{ahead}|{rec.admitted_at_ms}|{orjson.dumps([values]).decode()}",
            )
            _announced(bell, before)
            now = cat.now()
            claim = cat.claim("w", 60_000)
            assert claim is not None and claim.key == k
            assert claim.record.input_ref == "input://victim"
            stored = cat.get(k)
            assert stored is not None and stored.input_ref == "input://victim"
            assert claim.attempt.lease_expires_ms is not None
            assert claim.attempt.lease_expires_ms < now.boot_ms + 60_000 + 10_000


def test_malformed_notifications_stop_neither_the_doorbell_nor_a_claim(pg_url: str) -> None:
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        with _listening(cat) as bell:
            assert cat.claim("w", 60_000, kinds=["none"]) is None
            before = bell.received
            for payload in ("1|x|1|1|[[]]", "1|x|1|1|5", "1|garbage", "not a topic", "1|a|b|c|d"):
                _notify(pg_url, payload)
            deadline = time.monotonic() + 10
            while bell.received < before + 5:
                assert time.monotonic() < deadline
                time.sleep(0.001)
            assert cat.claim("w", 60_000) is None  # each taken or dropped: nothing raised
            k = key("after")
            before = bell.received
            admitting.admit(admission(k))
            _announced(bell, before)  # the listener still runs
            claim = cat.claim("w", 60_000)
            assert claim is not None and claim.key == k


def test_a_late_announcement_is_checked_on_the_servers_clock(pg_url: str) -> None:
    """An accurate announcement of a record admitted longer ago than the bound (received
    now, so fresh by this host's clock): the statement's own clock refuses it, and the claim
    is decided the usual way, on a fresh reading."""
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        k = key("old")
        rec = admitting.admit(admission(k))
        time.sleep(ANNOUNCED_MAX_AGE_MS / 1000 * 1.5)
        with _listening(cat) as bell:
            assert cat.claim("w", 60_000, kinds=["none"]) is None
            template = _core.catalog_admission_template(admission(k))
            values = [template[i] for i in _UNSTAMPED]
            before = bell.received
            _notify(
                pg_url,
                f"1|{rec.lease_boot_id}|{rec.claimable_from_ms}|{rec.admitted_at_ms}"
                f"|{orjson.dumps([values]).decode()}",
            )
            _announced(bell, before)
            claim = cat.claim("w", 60_000)
            assert claim is not None and claim.key == k
            assert rec.claimable_from_ms is not None and claim.attempt.lease_expires_ms is not None
            assert claim.attempt.lease_expires_ms > rec.claimable_from_ms + 60_000  # fresh


def test_with_a_backlog_a_woken_claim_does_not_try_an_announcement(pg_url: str) -> None:
    with _server_clocked(pg_url) as admitting, _server_clocked(pg_url) as cat:
        first = [key(f"bl{i}") for i in range(3)]
        admitting.admit_many([admission(k) for k in first])
        with _listening(cat) as bell:
            got = cat.claim("w", 60_000)  # the backlog: found one
            assert got is not None
            before = bell.received
            # Named to sort after the backlog: on the kernel clock (/proc/uptime, 10 ms steps)
            # it may be admitted in the backlog's millisecond, and ties go by key.
            admitting.admit(admission(key("bl9-new")))
            _announced(bell, before)
            store = cat.store
            assert isinstance(store, PostgresCatalogStore)
            commits, trips = store.commits, store.round_trips
            claim = cat.claim("w", 60_000)
            assert claim is not None and claim.key == first[1]  # claim order
            assert (store.commits - commits, store.round_trips - trips) == (1, 2)


def test_announcements_are_off_where_the_database_says_so(pg_url: str) -> None:
    """`tether.announce = off` (here in the URL's options; a DBA may set it on the database
    or the role): admissions notify their topics only, so a woken claim goes the usual way."""
    off = pg_url.replace("options=", "options=-ctether.announce%3Doff%20")
    assert off != pg_url
    with _server_clocked(off) as admitting, _server_clocked(pg_url) as cat:
        assert isinstance(admitting.store, PostgresCatalogStore) and not admitting.store.announce
        with _listening(cat) as bell:
            assert cat.claim("w", 60_000, kinds=["none"]) is None
            before = bell.received
            admitting.admit(admission(key("quiet")))
            _announced(bell, before)
            assert bell.take_announced(lambda _values: True, 10.0) is None
