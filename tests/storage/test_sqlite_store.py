"""The SQLite catalog store: URL, pragmas, schema versions, indexed claims, typed failures."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tether.activities import Catalog
from tether.errors import CatalogConfigError, CatalogStorageError
from tether.storage import SqliteCatalogStore, View, open_store
from tether.storage._schema import LATEST

from tests.activities.support import ManualClock, admission, key


def test_urls_name_an_absolute_sqlite_file(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path}/a.db")
    assert isinstance(store, SqliteCatalogStore) and store.path == f"{tmp_path}/a.db"
    store.close()
    relaxed = open_store(f"SQLite://{tmp_path}/c.db", synchronous="normal")
    assert isinstance(relaxed, SqliteCatalogStore) and relaxed.synchronous == "NORMAL"
    relaxed.close()
    bad_urls = ("sqlite://relative.db", "sqlite://", "postgres://db/x", "a.db", "sqlite:/x")
    for bad in (*bad_urls, f"sqlite://{tmp_path}/", f"sqlite://{tmp_path}/a.db?mode=ro"):
        with pytest.raises(CatalogConfigError):
            open_store(bad)
    with pytest.raises(CatalogConfigError):
        open_store(42)  # type: ignore[arg-type]
    with pytest.raises(CatalogConfigError):
        open_store(f"sqlite://{tmp_path}/b.db", synchronous="OFF")


def test_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogStorageError):
        open_store(f"sqlite://{tmp_path}/no/such/dir/a.db")


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
    with pytest.raises(CatalogStorageError, match="newer"):
        SqliteCatalogStore(path)
    # An empty file (version 0) is migrated forward; reopening is idempotent.
    fresh = str(tmp_path / "fresh.db")
    sqlite3.connect(fresh).close()
    SqliteCatalogStore(fresh).close()
    SqliteCatalogStore(fresh).close()


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
        (_sqlite._CLAIM_KIND, ("k", 0)),
        (_sqlite._CLAIM_KIND_WORLD, ("k", 0, "w")),
    ):
        plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        assert "activities_claimable" in plan, plan
        assert "SCAN activities" not in plan.replace("USING INDEX", "")
    for sql, params, index in (
        (_sqlite._HAS_PENDING, ("w",), "activities_pending_observation"),
        (_sqlite._HAS_UNFINISHED, ("k", "w"), "activities_claimable"),
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
    assert f"activities_{view}" in plan, plan
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
    SqliteCatalogStore(path).close()  # version 1 on disk
    v2 = (2, ("CREATE TABLE migration_probe (n INTEGER) STRICT",))
    v3 = (3, ("INSERT INTO migration_probe VALUES (3)",))
    monkeypatch.setattr(_schema, "MIGRATIONS", (*_schema.MIGRATIONS, v2, v3))
    monkeypatch.setattr(_schema, "LATEST", 3)
    SqliteCatalogStore(path).close()
    SqliteCatalogStore(path).close()  # reopening applies nothing twice
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 3
    assert conn.execute("SELECT n FROM migration_probe").fetchall() == [(3,)]
    conn.close()


def test_a_failing_migration_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.storage import _schema

    path = str(tmp_path / "f.db")
    SqliteCatalogStore(path).close()
    broken = (2, ("CREATE TABLE half_done (n INTEGER)", "THIS IS NOT SQL"))
    monkeypatch.setattr(_schema, "MIGRATIONS", (*_schema.MIGRATIONS, broken))
    monkeypatch.setattr(_schema, "LATEST", 2)
    with pytest.raises(CatalogStorageError):
        SqliteCatalogStore(path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 1
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
            new = _core.catalog_claim(row, "w", 1_000, clock.now_ms)
            # Another writer's change lands between our read and our write (same transaction,
            # so it is rolled back with ours).
            store._db().execute("UPDATE activities SET version = version + 1")
            return new

        with pytest.raises(CatalogStorageError, match="version"):
            store.apply((k.world_id, k.kind, k.activity_id), racing_claim)
        assert cat.get(k) == before
        claim = cat.claim("w", 1_000)
        assert claim is not None and claim.record.version == before.version + 1
