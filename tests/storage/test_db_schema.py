"""`tether db status` / `tether db upgrade` on both backends, and the refusal that names them."""

from __future__ import annotations

import getpass
import json
import re
import sqlite3
from pathlib import Path

import pytest
from tether import _exit
from tether.activities import Catalog
from tether.cli import main as tether
from tether.errors import SchemaOutdated
from tether.storage import _pg_schema
from tether.world import ComponentWrite, SqliteLedger, open_ledger
from tether.world._sqlite import SCHEMA_VERSION


def _status(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = tether(["db", "status", url, "--json"])
    out = json.loads(capsys.readouterr().out)
    return code, {s["store"]: (s["version"], s["state"]) for s in out["stores"]}


def test_postgres_status_upgrade_and_an_older_schema_refusing_to_open(
    pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _status(pg_url, capsys) == (1, {})  # nothing there yet: no store, exit 1
    Catalog.open(pg_url).close()  # a fresh database is created at the latest version
    open_ledger(pg_url).close()
    cat = _pg_schema.latest("catalog")
    assert _status(pg_url, capsys) == (
        0,
        {"catalog": (cat, "current"), "world": (1, "current")},
    )
    # This Tether gains a catalog migration: the current catalog is now older and refuses.
    step = (
        cat + 1,
        ("CREATE TABLE upgrade_probe (n INTEGER)", "INSERT INTO upgrade_probe VALUES (2)"),
    )
    monkeypatch.setitem(_pg_schema.MIGRATIONS, "catalog", (*_pg_schema.CATALOG_MIGRATIONS, step))
    with pytest.raises(SchemaOutdated, match=re.escape(f"tether db upgrade '{pg_url}'")) as info:
        Catalog.open(pg_url)
    assert (info.value.store, info.value.found, info.value.latest) == ("catalog", cat, cat + 1)
    assert _status(pg_url, capsys) == (
        1,
        {"catalog": (cat, "needs upgrade"), "world": (1, "current")},
    )
    capsys.readouterr()
    assert tether(["db", "upgrade", pg_url, "--json"]) == 0
    # It says what it did to each store: the catalog upgraded, the world left as it was.
    said = {
        s["store"]: (s["was"], s["upgrade"]) for s in json.loads(capsys.readouterr().out)["stores"]
    }
    assert said == {"catalog": (cat, f"upgraded from version {cat}"), "world": (1, "unchanged")}
    assert _status(pg_url, capsys) == (
        0,
        {"catalog": (cat + 1, "current"), "world": (1, "current")},
    )
    Catalog.open(pg_url).close()
    assert tether(["db", "upgrade", pg_url]) == 0  # idempotent: the step ran once
    assert capsys.readouterr().out.count("(unchanged)") == 2  # both stores, each said once


def test_sqlite_status_and_upgrade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tether.storage import _schema

    path = tmp_path / "catalog.db"
    url = f"sqlite://{path}"
    assert tether(["db", "upgrade", url]) == 2  # no store there, and none named
    capsys.readouterr()
    assert tether(["db", "upgrade", url, "--store", "catalog"]) == 0
    assert capsys.readouterr().out.strip().endswith("current (created)")
    assert tether(["db", "upgrade", url]) == 0
    assert capsys.readouterr().out.strip().endswith("current (unchanged)")
    assert _status(url, capsys) == (0, {"catalog": (_schema.LATEST, "current")})
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (_schema.LATEST + 1,))
    conn.commit()
    conn.close()
    assert _status(url, capsys)[0] == 1  # newer than this Tether: not current
    world = f"sqlite://{tmp_path / 'world.db'}"
    open_ledger(world).close()
    assert _status(world, capsys) == (0, {"world": (SCHEMA_VERSION, "current")})


@pytest.mark.parametrize("store", ["catalog", "world"])
def test_a_newer_sqlite_schema_is_refused_by_its_code_as_on_postgres(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str
) -> None:
    """A SQLite store written by a newer Tether is `catalog_newer` / `world_newer` (exit 5,
    the store cannot be used as it is), as a PostgreSQL one is, never a bare storage failure
    (exit 1); opening it refuses the same way and writes nothing."""
    from tether.storage import _schema

    path = tmp_path / f"{store}.db"
    url = f"sqlite://{path}"
    assert tether(["db", "upgrade", url, "--store", store]) == 0
    latest = _schema.LATEST if store == "catalog" else SCHEMA_VERSION
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (latest + 1,))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    capsys.readouterr()
    assert tether(["db", "upgrade", url, "--json"]) == _exit.STORE_UNUSABLE
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert (doc["code"], doc["details"]) == (
        f"{store}_newer",
        {"store": store, "found": latest + 1, "latest": latest},
    )
    assert err.startswith(f"tether db: {store}_newer: ") and "upgrade Tether" in err
    with pytest.raises(SchemaOutdated) as info:
        Catalog.open(url).close() if store == "catalog" else open_ledger(url).close()
    assert info.value.code == f"{store}_newer"
    assert _exit.for_error(info.value) == _exit.STORE_UNUSABLE
    assert path.read_bytes() == before


def test_a_sqlite_url_is_read_as_the_stores_read_it_and_any_file_name_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.runtime import Host
    from tether.storage import _schema

    odd = tmp_path / "100% sure"
    with Host(odd, [], workers=0, observe=False) as host:  # a data dir's default catalog
        url = host.catalog_url
    assert url == f"sqlite://{tmp_path}/100%25 sure/catalog.db"  # what a message asks to paste
    assert _status(url, capsys) == (0, {"catalog": (_schema.LATEST, "current")})
    four = "sqlite:///" + str(odd / "catalog.db")  # the form older messages printed
    assert _status(four, capsys) == (0, {"catalog": (_schema.LATEST, "current")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["100% sure"]  # no stray file made


# The version 1 layout of the SQLite world ledger (released: it never changes): the same
# columns as now, in rowid tables.
_WORLD_V1_ROWID_TABLES = {
    "ticks": "CREATE TABLE ticks (world_id TEXT NOT NULL, run_id TEXT NOT NULL,"
    " tick INTEGER NOT NULL, committed_ms INTEGER NOT NULL,"
    " PRIMARY KEY (world_id, run_id, tick))",
    "tick_tokens": "CREATE TABLE tick_tokens (world_id TEXT NOT NULL, run_id TEXT NOT NULL,"
    " tick INTEGER NOT NULL, token TEXT NOT NULL, PRIMARY KEY (world_id, run_id, tick, token))",
    "visibility": "CREATE TABLE visibility (world_id TEXT NOT NULL, token TEXT NOT NULL,"
    " PRIMARY KEY (world_id, token))",
    "components": "CREATE TABLE components (world_id TEXT NOT NULL, run_id TEXT NOT NULL,"
    " entity TEXT NOT NULL, component TEXT NOT NULL, tick INTEGER NOT NULL, value TEXT,"
    " PRIMARY KEY (world_id, run_id, entity, component, tick))",
}


def _as_world_v1(path: Path, *, version_table: bool) -> None:
    """Rewrite a ledger file into the version 1 layout, keeping every row (with or without the
    version table: the first ledgers had none)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for table, ddl in _WORLD_V1_ROWID_TABLES.items():
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_new")
        conn.execute(ddl)
        conn.execute(f"INSERT INTO {table} SELECT * FROM {table}_new")
        conn.execute(f"DROP TABLE {table}_new")
    conn.execute("CREATE INDEX components_by_tick ON components (world_id, run_id, tick)")
    if version_table:
        conn.execute("UPDATE schema_version SET version = 1")
    else:
        conn.execute("DROP TABLE schema_version")
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.parametrize("version_table", [True, False])
def test_a_version_1_sqlite_ledger_refuses_to_open_until_upgraded_with_its_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version_table: bool
) -> None:
    path = tmp_path / "world.db"
    url = f"sqlite://{path}"
    ledger = SqliteLedger.open(path)
    ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    first = ledger.commit(writer, ledger.head("w"), [ComponentWrite("e1", "pose", {"x": 1.0})])
    ledger.complete_post_commit(first)
    head = ledger.commit(writer, first, [ComponentWrite("e2", "pose", {"x": 2.0})])
    ledger.complete_post_commit(head)
    ledger.close()
    _as_world_v1(path, version_table=version_table)

    with pytest.raises(SchemaOutdated) as info:
        SqliteLedger.open(path)
    assert f"then run `tether db upgrade {url}`" in str(info.value)  # the command to paste
    assert (info.value.store, info.value.found, info.value.latest) == ("world", 1, 2)
    assert _status(url, capsys) == (1, {"world": (1, "needs upgrade")})
    assert tether(["db", "upgrade", url]) == 0
    assert _status(url, capsys) == (0, {"world": (SCHEMA_VERSION, "current")})
    assert tether(["db", "upgrade", url]) == 0  # idempotent

    conn = sqlite3.connect(path)
    ddl = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    for table in _WORLD_V1_ROWID_TABLES:
        assert ddl[table].endswith("WITHOUT ROWID"), table
    assert "components_by_tick" in indexes
    assert not any(name.endswith("_v1") for name in ddl)

    ledger = SqliteLedger.open(path)
    try:
        assert ledger.head("w") == head  # every row kept: the same head, token and state
        ledger.check_receipt(head)
        state = ledger.read_at(head)
        assert {k: state.get(*k) for k in state.keys()} == {
            ("e1", "pose"): {"x": 1.0},
            ("e2", "pose"): {"x": 2.0},
        }
        assert ledger.read_at(first).changes == frozenset({("e1", "pose")})
        assert ledger.visibility_allowlist("w") >= {first.visibility_token}
        writer = ledger.acquire_writer("w")
        later = ledger.commit(writer, head, [ComponentWrite("e1", "pose", {"x": 3.0})])
        assert ledger.read_at(later).get("e1", "pose") == {"x": 3.0}
    finally:
        ledger.close()


def test_db_errors_are_one_line_and_never_show_a_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    unreachable = tether(["db", "status", "postgresql://ann:s3cret@127.0.0.1:1/x"])
    assert unreachable == _exit.UNAVAILABLE
    err = capsys.readouterr().err
    assert "s3cret" not in err and err.count("\n") == 1  # a refusal: no warning besides
    assert "127.0.0.1:1/x" in err and "refused" in err
    assert tether(["db", "status", "mysql://ann:s3cret@h/x"]) == _exit.USAGE
    err = capsys.readouterr().err
    assert "s3cret" not in err and "unsupported URL" in err


def test_the_catalog_and_the_world_created_at_once_on_a_fresh_database_both_open(
    pg_base: str,
) -> None:
    import threading

    from tests.conftest import _Schemas

    failures: list[BaseException] = []
    with _Schemas(pg_base) as schemas:
        for _ in range(8):  # the collision, when unguarded, came in about 4 of 10
            url = schemas.new()
            start = threading.Barrier(2)

            def create(opener: object, url: str = url, start: threading.Barrier = start) -> None:
                start.wait()
                try:
                    opener(url).close()  # type: ignore[operator]
                except BaseException as exc:  # collected: the assert names it
                    failures.append(exc)

            threads = [
                threading.Thread(target=create, args=(o,)) for o in (Catalog.open, open_ledger)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
    assert failures == []


#: `tether db upgrade` whose catalog step takes 3 s, on sessions whose lock_timeout (the wait
#: for a row lock) is 1 s: a second upgrade must wait for the first's, not time out with it.
_SLOW_UPGRADE = """
import sys
from tether.cli import main
from tether.storage import _pg, _pg_schema
_pg.LOCK_TIMEOUT_MS = 1_000
step = (_pg_schema.latest("catalog") + 1, ("SELECT pg_sleep(3)",))
_pg_schema.MIGRATIONS["catalog"] = (*_pg_schema.CATALOG_MIGRATIONS, step)
sys.exit(main(sys.argv[1:]))
"""


def test_two_upgrades_at_once_of_a_fresh_database_both_succeed_and_report_it_current(
    pg_url: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    script = tmp_path / "slow_upgrade.py"
    script.write_text(_SLOW_UPGRADE)
    argv = [sys.executable, str(script), "db", "upgrade", pg_url, "--json"]
    both = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    both.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    cat = _pg_schema.latest("catalog") + 1
    did = []
    for proc in both:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err  # the second waited for the first's lock
        stores = {s["store"]: (s["version"], s["state"]) for s in json.loads(out)["stores"]}
        assert stores == {"catalog": (cat, "current"), "world": (1, "current")}
        did.append(tuple(sorted((s["store"], s["upgrade"]) for s in json.loads(out)["stores"])))
    # One of them made the stores; the other found them made, and says so.
    made = (("catalog", "created"), ("world", "created"))
    assert sorted(did) == sorted([made, (("catalog", "unchanged"), ("world", "unchanged"))])


def test_racing_upgrades_of_a_new_sqlite_store_report_one_creation(tmp_path: Path) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'world.db'}"
    argv = [sys.executable, "-m", "tether", "db", "upgrade", url, "--store", "world", "--json"]
    racers = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    said = []
    for proc in racers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        said += [s["upgrade"] for s in json.loads(out)["stores"]]
    assert sorted(said) == ["created", "unchanged", "unchanged", "unchanged"], said


def test_an_upgrade_lock_held_too_long_is_a_typed_error_and_nothing_is_written(
    pg_base: str, pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg
    from tether.storage._errors import MigrationLockTimeout

    monkeypatch.setattr(_pg_schema, "MIGRATION_LOCK_TIMEOUT_MS", 500)
    with psycopg.connect(pg_base, autocommit=True) as holder:  # another upgrade, stuck
        holder.execute("SELECT pg_advisory_lock(%s)", (_pg_schema.UPGRADE_KEY,))
        capsys.readouterr()
        assert tether(["db", "upgrade", pg_url, "--json"]) == _exit.FAILED
        out, err = capsys.readouterr()
        assert json.loads(out)["code"] == "migration_lock_timeout"
        assert err.startswith("tether db: migration_lock_timeout: ") and err.count("\n") == 1
        # A store opening a fresh database waits for the creation lock no longer either.
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (_pg_schema._VERSION_TABLE_KEY,))
            with pytest.raises(MigrationLockTimeout, match="run this again"):
                Catalog.open(pg_url)
    assert _status(pg_url, capsys) == (1, {})  # nothing was created


def _drop(url: str, sql: str) -> None:
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.partition("://")[2])
        try:
            conn.execute(sql)
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


@pytest.mark.parametrize(
    ("store", "sql", "missing"),
    [
        ("catalog", "DROP TABLE catalog_clock", ["catalog_clock"]),
        ("world", "DROP TABLE tick_tokens", ["tick_tokens"]),
        ("world", "DROP TABLE worlds", ["worlds"]),
    ],
)
def test_a_store_with_a_table_gone_is_damaged_and_neither_opened_nor_upgraded(
    store_url: str,
    store: str,
    sql: str,
    missing: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A table dropped by hand: the store's version says it is made, its tables disagree.
    `db status` says `damaged` naming the tables (exit 5), `db upgrade` refuses it
    (`store_damaged`, exit 5), and no store opens it: before, it read `current`, opened, and
    failed at its first use."""
    from tether.errors import StoreDamaged

    url = store_url
    if url.startswith("sqlite"):  # a SQLite file holds one store
        url = f"sqlite:///{tmp_path / (store + '.db')}"
    opened = Catalog.open(url) if store == "catalog" else open_ledger(url)
    opened.close()
    _drop(url, sql)
    capsys.readouterr()
    assert tether(["db", "status", url, "--json"]) == _exit.STORE_UNUSABLE
    (row,) = [s for s in json.loads(capsys.readouterr().out)["stores"] if s["store"] == store]
    assert (row["state"], row["missing"]) == ("damaged", missing)
    assert tether(["db", "upgrade", url, "--json", "--store", store]) == _exit.STORE_UNUSABLE
    assert json.loads(capsys.readouterr().out)["code"] == "store_damaged"
    with pytest.raises(StoreDamaged, match=missing[0]):
        (Catalog.open(url) if store == "catalog" else open_ledger(url)).close()


def test_a_store_whose_version_record_is_gone_is_damaged(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its tables there, its version record gone: not "no store" (and an upgrade that would
    create it over its own tables), but `damaged`."""
    from tether.errors import StoreDamaged

    url = store_url
    if url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'catalog.db'}"
    Catalog.open(url).close()
    table = "schema_version" if url.startswith("sqlite") else "tether_schema_version"
    _drop(url, f"DROP TABLE {table}")
    assert _status(url, capsys) == (_exit.STORE_UNUSABLE, {"catalog": (0, "damaged")})
    with pytest.raises(StoreDamaged, match="no schema version"):
        Catalog.open(url).close()
    capsys.readouterr()
    assert tether(["db", "upgrade", url, "--json", "--store", "catalog"]) == _exit.STORE_UNUSABLE
    assert json.loads(capsys.readouterr().out)["code"] == "store_damaged"


def test_a_sqlite_path_that_names_the_wrong_thing_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store path whose directory is missing (or a file) is a usage error naming it, exit 2;
    one that is a directory is never told to restore a backup it does not need."""
    (tmp_path / "d.db").mkdir()
    (tmp_path / "f").write_text("")
    cases = {
        "nodir/x.db": (_exit.USAGE, "no_such_directory"),
        "f/x.db": (_exit.USAGE, "not_a_directory"),
        "d.db": (_exit.STORE_UNUSABLE, "not_a_database"),
    }
    for path, (code, name) in cases.items():
        capsys.readouterr()
        url = f"sqlite:///{tmp_path / path}"
        assert tether(["db", "upgrade", url, "--store", "catalog", "--json"]) == code, path
        out, err = capsys.readouterr()
        assert json.loads(out)["code"] == name, out
        assert "backup" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "nodir").exists()  # nothing made on the way
    # A text file (a host.toml named by mistake) is said to be one: maybe the wrong file.
    (tmp_path / "host.toml").write_text('[host]\nstate_dir = "/var/lib/tether"\n')
    capsys.readouterr()
    url = f"sqlite:///{tmp_path / 'host.toml'}"
    assert tether(["db", "status", url]) == _exit.STORE_UNUSABLE
    err = capsys.readouterr().err
    assert "is a text file, not a SQLite database" in err and "not the store's file" in err


def test_an_older_postgres_catalog_needs_an_upgrade_and_is_not_damaged(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A catalog of version 3 has no `artifacts` table (version 4 adds it): that is an older
    schema, `needs upgrade` (exit 1), never `damaged`."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(_pg_schema.VERSION_TABLE)
        for _version, statements in _pg_schema.CATALOG_MIGRATIONS[:3]:
            for statement in statements:
                conn.execute(statement)
        conn.execute("INSERT INTO tether_schema_version VALUES ('catalog', 3)")
    assert _status(pg_url, capsys) == (1, {"catalog": (3, "needs upgrade")})
    capsys.readouterr()
    assert tether(["db", "upgrade", pg_url, "--store", "catalog"]) == 0
    # `--store catalog` upgrades that store only, and reports it only (it reported the world
    # ledger beside it, newer than this Tether, "unchanged").
    from tether.world._postgres import PostgresLedger

    PostgresLedger(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE tether_schema_version SET version = 99 WHERE store = 'world'")
    capsys.readouterr()
    assert tether(["db", "upgrade", pg_url, "--store", "catalog", "--json"]) == 0
    assert [s["store"] for s in json.loads(capsys.readouterr().out)["stores"]] == ["catalog"]


def test_tables_of_common_names_elsewhere_on_the_search_path_are_no_store(
    pg_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another application's `activities` or `worlds` table in a schema later on the search
    path (public, say) is not a Tether store whose version record is gone."""
    import uuid

    import psycopg
    from tether.testing._postgres import schema_url

    mine, theirs = (f"tether_{w}_{uuid.uuid4().hex[:8]}" for w in ("mine", "theirs"))
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {mine}")
        admin.execute(f"CREATE SCHEMA {theirs}")
        for table in ("activities", "catalog_clock", "worlds", "tick_tokens"):
            admin.execute(f"CREATE TABLE {theirs}.{table} (n int)")
    try:
        url = schema_url(pg_base, f"{mine},{theirs}")
        assert _status(url, capsys) == (1, {})  # no store in its own schema
        Catalog.open(url).close()  # made in its own schema, beside the others' tables
        open_ledger(url).close()
        assert _status(url, capsys)[0] == 0
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {mine} CASCADE")
            admin.execute(f"DROP SCHEMA {theirs} CASCADE")


def test_an_upgrade_of_a_sqlite_file_another_holds_too_long_is_a_typed_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl
    import os

    monkeypatch.setattr(_pg_schema, "MIGRATION_LOCK_TIMEOUT_MS", 300)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another upgrade, stuck
        capsys.readouterr()
        url = f"sqlite:///{tmp_path / 'catalog.db'}"
        assert tether(["db", "upgrade", url, "--store", "catalog", "--json"]) == _exit.FAILED
        assert json.loads(capsys.readouterr().out)["code"] == "migration_lock_timeout"
        assert not (tmp_path / "catalog.db").exists()  # nothing was written
    finally:
        os.close(fd)


def test_a_password_in_a_command_line_url_is_warned_of_and_never_printed(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tether masks a URL's password in what it prints, but a command line is readable by
    every local user (ps): said once on stderr, and the command goes on."""
    secret = "Sekrit-in-argv-81"
    scheme, _, rest = pg_url.partition("://")
    user, at, where = rest.partition("@")
    if not at:  # no user named: the server's default (trust auth ignores the password)
        user, where = getpass.getuser(), rest
    with_password = f"{scheme}://{user}:{secret}@{where}"
    tether(["db", "status", with_password])
    out, err = capsys.readouterr()
    assert "tether db: warning: the password in URL is visible" in err, err
    assert secret not in out + err
    tether(["db", "status", pg_url])
    assert "warning" not in capsys.readouterr().err
