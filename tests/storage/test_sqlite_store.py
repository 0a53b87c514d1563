"""The SQLite catalog store: URL, pragmas, schema versions, indexed claims, typed failures."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tether._sqlite_files import StoreFileError
from tether.activities import Catalog
from tether.errors import CatalogConfigError, CatalogStorageError
from tether.storage import SchemaOutdated, SqliteCatalogStore, View, open_store
from tether.storage._schema import LATEST

from tests.activities.support import ManualClock, admission, key


def test_urls_name_an_absolute_sqlite_file(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path}/a.db")
    assert isinstance(store, SqliteCatalogStore) and store.path == f"{tmp_path}/a.db"
    store.close()
    relaxed = open_store(f"SQLite://{tmp_path}/c.db", synchronous="normal")
    assert isinstance(relaxed, SqliteCatalogStore) and relaxed.synchronous == "NORMAL"
    relaxed.close()
    bad_urls = ("sqlite://relative.db", "sqlite://", "mysql://db/x", "a.db", "sqlite:/x")
    for bad in (*bad_urls, f"sqlite://{tmp_path}/", f"sqlite://{tmp_path}/a.db?mode=ro"):
        with pytest.raises(CatalogConfigError):
            open_store(bad)
    with pytest.raises(CatalogConfigError):
        open_store(42)  # type: ignore[arg-type]
    with pytest.raises(CatalogConfigError):
        open_store(f"sqlite://{tmp_path}/b.db", synchronous="OFF")


def test_missing_directory_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    from tether._dirs import DataDirError

    with pytest.raises(DataDirError, match="does not exist") as info:
        open_store(f"sqlite://{tmp_path}/no/such/dir/a.db")
    assert info.value.code == "no_such_directory"
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(("mode", "level"), [("FULL", 2), ("NORMAL", 1)])
def test_pragmas(tmp_path: Path, mode: str, level: int) -> None:
    store = SqliteCatalogStore(str(tmp_path / "p.db"), synchronous=mode)
    conn = store._db()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == level
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    fks = conn.execute("PRAGMA foreign_key_list(activities)").fetchall()
    assert [(fk[2], fk[3], fk[4]) for fk in fks] == [("activity_kinds", "kind", "kind")]
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == LATEST
    store.close()
    with pytest.raises(CatalogStorageError):
        store.get(("w", "k", "a"))


def test_a_newer_schema_is_refused_and_an_older_one_migrated(tmp_path: Path) -> None:
    path = str(tmp_path / "v.db")
    SqliteCatalogStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (LATEST + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(SchemaOutdated, match="newer") as info:
        SqliteCatalogStore(path)
    assert info.value.code == "catalog_newer"
    # An empty database (version 0) is migrated forward; reopening is idempotent.
    fresh = str(tmp_path / "fresh.db")
    conn = sqlite3.connect(fresh)
    conn.execute("PRAGMA journal_mode=WAL")  # writes its first page: a database, no tables
    conn.close()
    SqliteCatalogStore(fresh).close()
    SqliteCatalogStore(fresh).close()
    # A 0-byte file is no empty database but one cut short: refused, never given a new schema.
    cut = tmp_path / "cut.db"
    cut.write_bytes(b"")
    with pytest.raises(StoreFileError, match="store_truncated"):
        SqliteCatalogStore(str(cut))
    assert cut.read_bytes() == b""


def test_a_drifted_table_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "d.db")
    SqliteCatalogStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE activities DROP COLUMN decision_note")
    conn.commit()
    conn.close()
    with pytest.raises(CatalogStorageError, match="column"):
        SqliteCatalogStore(path)


def test_claim_goes_straight_to_claimable_rows(tmp_path: Path) -> None:
    store = SqliteCatalogStore(str(tmp_path / "q.db"))
    conn = store._db()
    from tether.storage import _sqlite

    for sql, params in (
        (_sqlite._CLAIM_KIND, ("k", 0, "", "")),
        (_sqlite._CLAIM_KIND_WORLD, ("k", 0, "", "h", "w")),
        (_sqlite._NEXT_KIND, ("k", "", "h")),
    ):
        plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        assert "activities_claimable" in plan, plan
        assert "SCAN activities" not in plan.replace("USING INDEX", "")
    for sql, params, index in (
        (_sqlite._HAS_UNSETTLED, ("w",), "activities_unsettled"),
        (_sqlite._OTHER_BOOT, ("k", "b"), "activities_claimable"),
    ):
        plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        assert index in plan, plan
    store.close()


@pytest.mark.parametrize("view", ["claimable", "pending_observation", "awaiting_decision"])
@pytest.mark.parametrize("world_id", [None, "w"])
def test_scans_walk_their_partial_index(tmp_path: Path, view: View, world_id: str | None) -> None:
    from tether.storage import _sqlite

    store = SqliteCatalogStore(str(tmp_path / "scan.db"))
    traced: list[str] = []
    conn = store._db()
    conn.set_trace_callback(traced.append)
    after = ("x",) * len(_sqlite._VIEWS[view][2])
    store.page(view, 0, ["k"], world_id, after, 10)
    conn.set_trace_callback(None)
    sql = traced[-1]
    plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
    # Results pending observation are the first range of the unsettled index (version 4).
    index = "activities_unsettled" if view == "pending_observation" else f"activities_{view}"
    assert index in plan, plan
    assert "SCAN" not in plan, plan  # a range of the index, never a walk of all of it
    store.close()


def test_a_corrupt_row_is_a_typed_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    clock = ManualClock()
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        k = key()
        cat.admit(admission(k))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE activities SET attempt_owner = 'ghost'")  # half an attempt group
    conn.commit()
    conn.close()
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        with pytest.raises(CatalogStorageError, match="attempt_owner"):
            cat.get(k)
        with pytest.raises(CatalogStorageError):
            cat.claim("w", 1_000)
        with pytest.raises(CatalogStorageError):
            list(cat.iter_claimable())


def test_strict_tables_refuse_wrongly_typed_values(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Catalog.open(f"sqlite://{path}", clock=ManualClock()) as cat:
        cat.admit(admission(key()))
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE activities SET fence = 'x'")
    conn.close()


def test_forward_migrations_apply_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.storage import _schema

    path = str(tmp_path / "m.db")
    SqliteCatalogStore(path).close()  # the latest version on disk
    first, second = LATEST + 1, LATEST + 2
    probe = (first, ("CREATE TABLE migration_probe (n INTEGER) STRICT",), False)
    insert = (second, (f"INSERT INTO migration_probe VALUES ({second})",), False)
    monkeypatch.setattr(_schema, "MIGRATIONS", (*_schema.MIGRATIONS, probe, insert))
    monkeypatch.setattr(_schema, "LATEST", second)
    with pytest.raises(SchemaOutdated, match="tether db upgrade"):
        SqliteCatalogStore(path)  # an older schema refuses to open
    SqliteCatalogStore(path, upgrade=True).close()
    SqliteCatalogStore(path).close()  # reopening applies nothing twice
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == second
    assert conn.execute("SELECT n FROM migration_probe").fetchall() == [(second,)]
    conn.close()


def test_a_failing_migration_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.storage import _schema

    path = str(tmp_path / "f.db")
    SqliteCatalogStore(path).close()
    broken = (LATEST + 1, ("CREATE TABLE half_done (n INTEGER)", "THIS IS NOT SQL"), False)
    monkeypatch.setattr(_schema, "MIGRATIONS", (*_schema.MIGRATIONS, broken))
    monkeypatch.setattr(_schema, "LATEST", LATEST + 1)
    with pytest.raises(CatalogStorageError):
        SqliteCatalogStore(path, upgrade=True)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == LATEST
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "half_done" not in tables
    conn.close()


def test_a_write_is_compare_and_swap_on_version(tmp_path: Path) -> None:
    """If the stored version moved between the read and the write, nothing is written."""
    from tether import _core

    path = tmp_path / "cas.db"
    clock = ManualClock()
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        k = key()
        cat.admit(admission(k))
        store = cat.store
        assert isinstance(store, SqliteCatalogStore)
        before = cat.get(k)
        assert before is not None

        def racing_claim(row: tuple[object, ...] | None) -> tuple[object, ...]:
            assert row is not None
            new = _core.catalog_claim(row, "w", 1_000, clock.now())
            # Another writer's change lands between our read and our write (same transaction,
            # so it is rolled back with ours).
            store._db().execute("UPDATE activities SET version = version + 1")
            return new

        with pytest.raises(CatalogStorageError, match="version"):
            store.apply((k.world_id, k.kind, k.activity_id), racing_claim)
        assert cat.get(k) == before
        claim = cat.claim("w", 1_000)
        assert claim is not None and claim.record.version == before.version + 1


def _v1_file(path: Path, rows: list[tuple[object, ...]]) -> None:
    """A catalog file exactly as schema version 1 wrote it, holding ``rows`` (v1 columns)."""
    from tether.storage import _schema

    version, statements, _ = _schema.MIGRATIONS[0]
    assert version == 1
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    _schema.current_version(conn)
    for statement in statements:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version (id, version) VALUES (1, 1)")
    v1 = [r[1] for r in conn.execute("PRAGMA table_info(activities)")]
    for row in rows:
        conn.execute("INSERT OR IGNORE INTO activity_kinds (kind) VALUES (?)", (row[1],))
        conn.execute(
            f"INSERT INTO activities ({', '.join(v1)}) VALUES ({', '.join('?' * len(v1))})",
            row,
        )
    conn.execute("COMMIT")
    conn.close()


# The columns later schema versions added (v2: lease clock and derived flags; v3: retention).
AFTER_V1 = (
    "lease_boot_id",
    "pending_observation",
    "unsettled",
    "compacted_at_ms",
    "compactable_from_ms",
    "bound_host",
)


def _undo_version_5(conn: sqlite3.Connection) -> None:
    """Inside a transaction: back to version 4's layout (no bound host, its claimable index)."""
    conn.execute("DROP INDEX activities_claimable")
    conn.execute("ALTER TABLE activities DROP COLUMN bound_host")
    conn.execute(next(s for s in _v1_statements() if "activities_claimable" in s))
    conn.execute("UPDATE schema_version SET version = 4")


def _v1_statements() -> tuple[str, ...]:
    from tether.storage import _schema

    return _schema.MIGRATIONS[0][1]


def test_a_version_4_catalog_gains_bound_hosts_through_upgrade(tmp_path: Path) -> None:
    """Version 5 adds `bound_host`: a version-4 file refuses to open naming `tether db
    upgrade`; the upgrade keeps every row unchanged (bound to no host) and rebuilds the
    claimable index with the bound host; then device-bound work is claimed on its host only."""
    from tether.cli import main as tether
    from tether.errors import WrongHost

    clock = ManualClock()
    path = tmp_path / "v4.db"
    old, leased = key("old"), key("leased")
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        cat.admit(admission(old))
        cat.admit(admission(leased))
        assert cat.claim_key(leased, "w", 3_600_000) is not None
        before = {k: cat.get(k) for k in (old, leased)}
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    _undo_version_5(conn)
    conn.execute("COMMIT")
    conn.close()
    with pytest.raises(SchemaOutdated, match=f"version 4, this Tether needs {LATEST}"):
        Catalog.open(f"sqlite://{path}", clock=clock)
    assert tether(["db", "upgrade", f"sqlite://{path}"]) == 0
    conn = sqlite3.connect(path)
    (sql,) = conn.execute(
        "SELECT sql FROM sqlite_schema WHERE name = 'activities_claimable'"
    ).fetchone()
    assert "bound_host" in sql
    conn.close()
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        assert {k: cat.get(k) for k in before} == before
        bound = key("bound")
        cat.admit(dataclasses.replace(admission(bound), bound_host="arm-host"))
        with pytest.raises(WrongHost):
            cat.claim_key(bound, "w", 1000, host="other-host")
        c = cat.claim("w", 1000, host="other-host")
        assert c is not None and c.key == old
        assert cat.claim("w", 1000, host="other-host") is None
        assert cat.claimable_in_ms(host="other-host") is not None  # the leased one, later
        assert cat.claimable_in_ms(host="arm-host") == 0
        c = cat.claim("w", 1000, host="arm-host")
        assert c is not None and c.key == bound and c.record.bound_host == "arm-host"


def test_a_version_1_catalog_migrates_its_rows_through_the_core(tmp_path: Path) -> None:
    """Existing data dirs migrate forward: the derived columns come from the core, each view
    and the lifecycle gate use them, and a v1 lease (a wall-clock time of no boot) has expired
    once a clock reads the catalog."""
    from tether import _core
    from tether.activities._record import COLUMNS

    from tests.activities.support import bound_claim, evidence_for, receipt, result

    clock = ManualClock()
    source = tmp_path / "source.db"
    admitted, leased, done, settled = (key(n) for n in ("admitted", "leased", "done", "set"))
    elsewhere = key("other", world="w2")
    with Catalog.open(f"sqlite://{source}", clock=clock) as cat:
        bound_claim(cat, leased, lease_ms=3_600_000)
        for k, name in ((done, "done"), (settled, "set"), (elsewhere, "o")):
            c = bound_claim(cat, k)
            cat.record_result(k, c.fence, result(name))
        cat.settle(settled, receipt(9), evidence_for(settled, result("set")))
        cat.settle(elsewhere, receipt(9, world="w2"), evidence_for(elsewhere, result("o")))
        cat.admit(admission(admitted))
        records = {k: cat.get(k) for k in (admitted, leased, done, settled, elsewhere)}
        new_columns = AFTER_V1
        rows = []
        for k in records:
            row = cat.store.get((k.world_id, k.kind, k.activity_id))
            assert row is not None
            rows.append(tuple(v for c, v in zip(COLUMNS, row, strict=True) if c not in new_columns))
    assert len(rows) == 5
    path = tmp_path / "v1.db"
    _v1_file(path, rows)

    clock.advance(1)  # the v1 lease is still far in the future on the old clock
    with pytest.raises(SchemaOutdated, match=f"version 1, this Tether needs {LATEST}"):
        Catalog.open(f"sqlite://{path}", clock=clock)
    SqliteCatalogStore(str(path), upgrade=True).close()  # `tether db upgrade`
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        conn = sqlite3.connect(path)
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == LATEST
        for k, before in records.items():
            rec = cat.get(k)
            assert before is not None and rec is not None
            assert (rec.pending_observation, rec.unsettled) == (
                before.pending_observation,
                before.unsettled,
            )
            assert rec.lease_boot_id == ""  # v1 leases were wall-clock times of no boot
            assert rec.version == before.version  # a migration is no transition
        assert [r.key for r in cat.iter_pending_observation()] == [done]
        assert cat.has_unsettled("w1") and not cat.has_unsettled("w2")
        # The derived columns are exactly what the core decodes as consistent.
        for row in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM activities"):
            assert _core.catalog_check_row(row) == row
        conn.close()
        # The first claim puts the store on this boot's clock: the v1 lease has expired.
        first = cat.claim("w", 1_000)
        second = cat.claim("w", 1_000)
        assert first is not None and second is not None
        assert {first.key, second.key} == {admitted, leased}
        assert not next(c for c in (first, second) if c.key == leased).attempt.may_execute
        assert all(c.record.lease_boot_id == clock.boot_id for c in (first, second))


def test_a_version_1_row_the_core_cannot_decode_stops_the_migration_and_loses_nothing(
    tmp_path: Path,
) -> None:
    from tether.activities._record import COLUMNS

    clock = ManualClock()
    with Catalog.open(f"sqlite://{tmp_path / 'source.db'}", clock=clock) as cat:
        cat.admit(admission(key()))
        row = cat.store.get(("w1", "sim.rollout", "a1"))
    assert row is not None
    v1 = [v for c, v in zip(COLUMNS, row, strict=True) if c not in AFTER_V1]
    v1[COLUMNS.index("attempt_owner")] = "ghost"  # half an attempt group
    path = tmp_path / "v1.db"
    _v1_file(path, [tuple(v1)])
    with pytest.raises(CatalogStorageError, match="cannot migrate catalog row"):
        SqliteCatalogStore(str(path), upgrade=True)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 1
    assert conn.execute("SELECT attempt_owner FROM activities").fetchall() == [("ghost",)]
    conn.close()


def test_aligning_the_clock_rebases_other_boots_rows_once(tmp_path: Path) -> None:
    """Once per boot, every row holding lease-clock values of another boot goes through the
    core's rebase (the claimable index then compares values of one clock); finished rows hold
    none and are left alone."""
    from tether import _core

    from tests.activities.support import bound_claim, result

    old = ManualClock(boot_id="boot-old")
    path = tmp_path / "a.db"
    with Catalog.open(f"sqlite://{path}", clock=old) as cat:
        leased, finished = key("leased"), key("finished")
        bound_claim(cat, leased, lease_ms=3_600_000)
        c = bound_claim(cat, finished)
        cat.record_result(finished, c.fence, result())
        cat.admit(admission(key("waiting")))
        store = cat.store
        new = ManualClock(now_ms=5, boot_id="boot-new")
        now = new.now()
        assert store.align_clock("boot-new", lambda row: _core.catalog_rebase(row, now)) == 2
        assert store.align_clock("boot-new", lambda row: _core.catalog_rebase(row, now)) == 0
        rebased = cat.get(leased)
        assert rebased is not None and rebased.lease_boot_id == "boot-new"
        assert rebased.claimable_from_ms == 5 and rebased.attempt is not None
        assert rebased.attempt.lease_expires_ms == 5
        done = cat.get(finished)
        assert done is not None and done.lease_boot_id == "boot-old"


def test_a_version_2_catalog_gains_the_compactable_column_from_the_core(tmp_path: Path) -> None:
    """Schema 3 adds retention: existing settled rows become compactable from their settlement
    time (computed by the core, not SQL), unsettled rows never, and compaction then works."""
    from tether.activities._record import COLUMNS
    from tether.storage import _schema

    from tests.activities.support import bound_claim, evidence_for, receipt, result

    clock = ManualClock()
    settled, pending = key("settled"), key("pending")
    with Catalog.open(f"sqlite://{tmp_path / 'source.db'}", clock=clock) as cat:
        for k in (settled, pending):
            c = bound_claim(cat, k)
            cat.record_result(k, c.fence, result(k.activity_id))
        cat.settle(settled, receipt(9), evidence_for(settled, result("settled")))
        settled_at = cat.get(settled).settlement.settled_at_ms  # type: ignore[union-attr]
        rows = [cat.store.get((k.world_id, k.kind, k.activity_id)) for k in (settled, pending)]
    v3 = ("compacted_at_ms", "compactable_from_ms", "bound_host")
    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    _schema.current_version(conn)
    for _version, statements, _ in _schema.MIGRATIONS[:2]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("INSERT INTO schema_version (id, version) VALUES (1, 2)")
    names = [c for c in COLUMNS if c not in v3]
    for row in rows:
        assert row is not None
        conn.execute("INSERT OR IGNORE INTO activity_kinds (kind) VALUES (?)", (row[1],))
        values = [v for c, v in zip(COLUMNS, row, strict=True) if c not in v3]
        conn.execute(
            f"INSERT INTO activities ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
            values,
        )
    conn.execute("COMMIT")
    conn.close()

    # One migration policy for every backend: the v2 file refuses to open, naming the command,
    # and `tether db upgrade` migrates it.
    url = f"sqlite://{path}"
    with pytest.raises(
        SchemaOutdated, match=rf"version 2, this Tether needs {LATEST}.*tether db upgrade"
    ):
        Catalog.open(url, clock=clock)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 2
    conn.close()
    from tether.cli import main as tether

    assert tether(["db", "upgrade", url]) == 0
    with Catalog.open(url, clock=clock) as cat:
        s, p = cat.get(settled), cat.get(pending)
        assert s is not None and p is not None
        assert (s.compactable_from_ms, s.compacted_at_ms) == (settled_at, None)
        assert (p.compactable_from_ms, p.compacted_at_ms) == (None, None)
        assert [r.key for r in cat.iter_compactable(0)] == [settled]
        assert cat.compact_settled(0) == 1
        assert cat.get(settled).compacted and not cat.get(pending).compacted  # type: ignore[union-attr]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == LATEST
    conn.close()


def test_a_known_row_skips_the_read_and_a_stale_one_is_decided_on_the_stored_row(
    tmp_path: Path,
) -> None:
    from tether.activities import operation_id_for
    from tether.errors import StaleFence

    from tests.activities.support import result

    clock = ManualClock()
    url = f"sqlite://{tmp_path}/known.db"
    with Catalog.open(url, clock=clock) as a, Catalog.open(url, clock=clock) as b:
        k1, k2, k3 = key("k1"), key("k2"), key("k3")
        # a claimed k1 and knows its row: the bind is swapped in without reading it.
        a.admit(admission(k1))
        c1 = a.claim("a", 1_000, world_id=k1.world_id)
        assert c1 is not None and c1.key == k1
        statements: list[str] = []
        a.store._db().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        a.bind_provider_operation(k1, c1.fence, operation_id_for(k1))
        assert statements and not any(s.startswith("SELECT") for s in statements)
        a.store._db().set_trace_callback(None)  # type: ignore[attr-defined]
        # b changed k2 after a last saw it (a renewal of a's own fence): a's swap misses, the
        # stored row decides, and b's longer lease is kept.
        a.admit(admission(k2))
        c2 = a.claim("a", 1_000, world_id=k2.world_id)
        assert c2 is not None and c2.key == k2
        renewed = b.renew(k2, c2.fence, 50_000)
        bound = a.bind_provider_operation(k2, c2.fence, operation_id_for(k2))
        assert bound.operation_id == operation_id_for(k2) and bound.attempt is not None
        assert bound.attempt.lease_expires_ms == renewed.attempt.lease_expires_ms  # type: ignore[union-attr]
        # a knows k3 as admitted (fence 0); b claims it: on a's row fence 1 is unknown, on the
        # stored row it is live, so the bind succeeds.
        a.admit(admission(k3))
        c3 = b.claim("b", 1_000, world_id=k3.world_id)
        assert c3 is not None and c3.key == k3
        assert a.bind_provider_operation(k3, c3.fence, operation_id_for(k3)).fence == c3.fence
        # a still knows k1 at fence 1; b reclaims it after the lease: the old fence looks
        # current on a's row but is stale on the stored one.
        clock.advance(1_000)
        later = b.claim("b", 1_000, world_id=k1.world_id)
        assert later is not None and later.key == k1 and later.fence == c1.fence + 1
        with pytest.raises(StaleFence):
            a.record_result(k1, c1.fence, result())
        stored = b.get(k1)
        assert stored is not None and stored.result is None and stored.fence == later.fence


def test_an_admission_is_inserted_without_a_read_and_an_existing_key_still_decides(
    tmp_path: Path,
) -> None:
    from tether.errors import AdmissionConflict

    url = f"sqlite://{tmp_path}/insert.db"
    clock = ManualClock()
    with Catalog.open(url, clock=clock) as a, Catalog.open(url, clock=clock) as b:
        k = key()
        statements: list[str] = []
        a.store._db().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        first = a.admit(admission(k))
        a.store._db().set_trace_callback(None)  # type: ignore[attr-defined]
        assert not any(s.startswith("SELECT") for s in statements)  # a new key: no read
        again = b.admit(admission(k))  # b does not know k: the insert finds it, b decides
        assert again == first and b.get(k) == first
        with Catalog.open(url, clock=clock) as c, pytest.raises(AdmissionConflict):
            c.admit(admission(k, input_digest="sha256:other"))
        assert a.get(k) == first


def test_a_version_3_catalog_is_refused_until_upgraded_and_keeps_its_rows(tmp_path: Path) -> None:
    """Version 4 folds the pending-observation index into the unsettled one: a version 3 file
    (its two indexes) refuses to open, `tether db upgrade` swaps the indexes, and every row,
    view and the lifecycle gate are as before."""
    from tether.storage import _schema

    from tests.activities.support import bound_claim, evidence_for, receipt, result

    clock = ManualClock()
    path = tmp_path / "v3.db"
    admitted, leased, done, settled = (key(n) for n in ("admitted", "leased", "done", "set"))
    elsewhere = key("other", world="w2")
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        bound_claim(cat, leased, lease_ms=3_600_000)
        for k, name in ((done, "done"), (settled, "set"), (elsewhere, "o")):
            c = bound_claim(cat, k)
            cat.record_result(k, c.fence, result(name))
        cat.settle(settled, receipt(9), evidence_for(settled, result("set")))
        cat.settle(elsewhere, receipt(9, world="w2"), evidence_for(elsewhere, result("o")))
        cat.admit(admission(admitted))
        before = {k: cat.get(k) for k in (admitted, leased, done, settled, elsewhere)}
    # The file as version 3 left it: version 5 undone, version 4's index swapped back for
    # version 2's two.
    v2_indexes = [s for s in _schema.MIGRATIONS[1][1] if s.startswith("CREATE INDEX")]
    assert len(v2_indexes) == 2 and _schema.MIGRATIONS[3][0] == 4
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    _undo_version_5(conn)
    conn.execute("DROP INDEX activities_unsettled")
    for statement in v2_indexes:
        conn.execute(statement)
    conn.execute("UPDATE schema_version SET version = 3")
    conn.execute("COMMIT")
    conn.close()

    with pytest.raises(SchemaOutdated, match=f"version 3, this Tether needs {LATEST}"):
        Catalog.open(f"sqlite://{path}", clock=clock)
    from tether.cli import main as tether

    assert tether(["db", "upgrade", f"sqlite://{path}"]) == 0
    conn = sqlite3.connect(path)
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
    assert "activities_pending_observation" not in indexes and "activities_unsettled" in indexes
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == LATEST
    conn.close()
    with Catalog.open(f"sqlite://{path}", clock=clock) as cat:
        assert {k: cat.get(k) for k in before} == before
        assert [r.key for r in cat.iter_pending_observation()] == [done]
        assert [r.key for r in cat.iter_pending_observation(world_id="w2")] == []
        assert cat.has_unsettled("w1") and not cat.has_unsettled("w2")
        cat.settle(done, receipt(9), evidence_for(done, result("done")))
        assert list(cat.iter_pending_observation()) == []
        assert cat.has_unsettled("w1")  # admitted and leased are still unsettled


def test_stores_of_one_file_in_a_process_share_one_transaction_lock(tmp_path: Path) -> None:
    """In-process transactions of every store on one file queue on one lock (the next starts
    when the previous ends) instead of meeting SQLite's lock, whose busy handler sleeps."""
    path = tmp_path / "catalog.db"
    a, b = SqliteCatalogStore(str(path)), SqliteCatalogStore(str(path))
    (tmp_path / "link").symlink_to(tmp_path)
    c = SqliteCatalogStore(str(tmp_path / "link" / "catalog.db"))  # the same file
    other = SqliteCatalogStore(str(tmp_path / "other.db"))
    try:
        assert a._lock is b._lock is c._lock and a._lock is not other._lock
        with a._lock:  # a transaction of `a` is open: `b` waits for its end to begin one
            assert not b._lock.acquire(blocking=False)
            assert other._lock.acquire(blocking=False)
            other._lock.release()
        catalog_a, catalog_b = Catalog(a, clock=ManualClock()), Catalog(b, clock=ManualClock())
        catalog_a.admit(admission(key("one")))
        assert catalog_b.get(key("one")) is not None
    finally:
        for store in (a, b, c, other):
            store.close()


_LAST_CONNECTION = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])  # read-write: the last one to close checkpoints
conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
conn.close()
"""


@pytest.mark.parametrize("store", ["catalog", "world"])
def test_a_second_store_of_a_file_in_a_process_keeps_the_first_ones_locks(
    tmp_path: Path, store: str
) -> None:
    """A store opened while another store of this process holds its file does not read the
    file again (closing any descriptor of it drops every POSIX lock the process holds on it,
    SQLite's own among them): another process closing its connection (`tether db prune`, a
    worker) then never takes itself for the last one, so the write-ahead log the open stores
    write is never deleted under them, and nothing they commit is lost."""
    import subprocess
    import sys

    from tether.world import SqliteLedger

    path = tmp_path / f"{store}.db"
    if store == "catalog":
        first: Any = Catalog.open(f"sqlite://{path}")
        first.admit(admission(key("a1")))
        Catalog.open(f"sqlite://{path}").close()  # a second store of the file, here
        other = [sys.executable, "-m", "tether", "db", "prune", "--catalog", f"sqlite://{path}",
                 "--older-than", "1d", "--json"]  # fmt: skip
    else:
        first = SqliteLedger.open(path)
        first.create_world("w1")
        SqliteLedger.open(path).close()
        other = [sys.executable, "-c", _LAST_CONNECTION, str(path)]
    done = subprocess.run(other, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert Path(f"{path}-wal").exists(), "the write-ahead log was deleted under an open store"
    if store == "catalog":
        first.admit(admission(key("a2")))
        assert first.get(key("a2")) is not None
    else:
        first.create_world("w2")
        assert first.worlds() == ["w1", "w2"]
    first.close()
    # What the open store committed after the other process closed is in the file.
    if store == "catalog":
        again = Catalog.open(f"sqlite://{path}")
        assert again.get(key("a2")) is not None
    else:
        again = SqliteLedger.open(path)
        assert again.worlds() == ["w1", "w2"]
    again.close()
