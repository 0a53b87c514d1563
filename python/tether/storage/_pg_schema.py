"""PostgreSQL schemas of the catalog and the world ledger, and their forward-only migrations.

Both stores keep their version in one table, `tether_schema_version (store, version)`, so a
catalog and a world ledger may share a database (or a schema, `options=-csearch_path=...`).
A fresh database is created at the latest version when a store opens it; a database holding an
older version refuses to open (`SchemaOutdated`, naming `tether db upgrade URL`); a newer one
is refused too. Migrations run in one transaction under an advisory lock, so two processes
upgrading at once apply each step once: the second waits for the first (up to
`MIGRATION_LOCK_TIMEOUT_MS`, longer than the sessions' `lock_timeout`, which bounds row
locks: a migration may take longer), then finds the store current. `tether db upgrade` also
holds `UPGRADE_KEY` for its whole run (`lock_upgrades`), so a second one decides which stores
to upgrade, and reports them, only once the first is done. Advisory locks belong to the
database: upgrades of two schemas of one database wait for each other too.

The catalog's table has the Rust core's columns (`catalog_columns()`), all integers BIGINT,
and one partial index per view the catalog scans, over columns only the core computes:
- `activities_claimable (claimable_from_ms, kind, world_id, activity_id)` where it is not
  null: claims (`FOR UPDATE SKIP LOCKED`) and the claimable scan walk it in claim order; leased
  rows sit beyond now, finished rows are not in it;
- `activities_pending_observation`, `activities_awaiting_decision` (world, kind, id) and
  `activities_unsettled` (world) where their flag is 1;
- (catalog version 2, retention, as the SQLite catalog's version 3) `compacted_at_ms` and the
  core-derived `compactable_from_ms`, with `activities_compactable (compactable_from_ms,
  world_id, kind, activity_id)` where it is not null, which compaction walks up to a cutoff.
  Existing rows get the derived column from the core (`catalog_derive_row`), never from SQL.
- (catalog version 3, as the SQLite catalog's version 5) `bound_host`, the host that owns the
  device an Activity drives (a fact of its immutable admission; '' for work any host may
  claim), and the claimable index rebuilt as (claimable_from_ms, kind, world_id, activity_id,
  bound_host): a claim on a host filters unbound rows and its own off the index entries.
  Existing rows were admitted before any binding: '' (any host).
- (catalog version 4) `artifacts (hexdigest, size, data)`: the payloads above the inline bound
  of every host sharing the catalog, content-addressed and write-once
  (`tether.storage._pg_artifacts`; a SQLite catalog is one host's, its payloads stay files).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from itertools import compress
from operator import ne
from typing import Any

import psycopg

from tether._core import CatalogStorageError, catalog_columns, catalog_derive_row
from tether.storage._errors import (
    MigrationLockTimeout,
    NoSuchSchema,
    SchemaDenied,
    SchemaOutdated,
    StoreDamaged,
)
from tether.storage._urls import redact

VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS tether_schema_version"
    " (store TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)
# One advisory lock key per store for migrations (any constant; 'tether' in ASCII plus 1/2).
_LOCK_KEYS = {"catalog": 0x746574686572_01, "world": 0x746574686572_02}
#: Taken first by any store's creation or migration: both stores create the one
#: `tether_schema_version` table, and two CREATE TABLE IF NOT EXISTS of it at once collide in
#: the server's own catalog (a unique violation on pg_type).
_VERSION_TABLE_KEY = 0x746574686572_00
#: Held by `tether db upgrade` for its whole run (`lock_upgrades`, a session lock).
UPGRADE_KEY = 0x746574686572_03
#: How long a store's creation or migration, and `tether db upgrade`, wait for another
#: process's (its advisory lock) before `MigrationLockTimeout` (ms).
MIGRATION_LOCK_TIMEOUT_MS = 60_000

#: The catalog columns of type TEXT (every other one is BIGINT), of every version.
TEXT_COLUMNS = {
    "world_id",
    "kind",
    "activity_id",
    "source_run_id",
    "source_token",
    "input_ref",
    "input_digest",
    "attempt_owner",
    "operation_id",
    "guard_ref",
    "guard_digest",
    "result_ref",
    "result_digest",
    "result_media_type",
    "evidence_ref",
    "evidence_digest",
    "decision_outcome",
    "decision_operator",
    "decision_note",
    "settled_run_id",
    "settled_token",
    "settlement_evidence_digest",
    "lease_boot_id",
    "bound_host",  # version 3
}
_NOT_NULL = {
    "world_id",
    "kind",
    "activity_id",
    "source_run_id",
    "source_tick",
    "source_token",
    "input_ref",
    "input_digest",
    "admitted_at_ms",
    "fence",
    "attempt_count",
    "retry_authorized",
    "evidence_revision",
    "awaiting_decision",
    "lease_boot_id",
    "pending_observation",
    "unsettled",
    "version",
}


#: Columns later migrations add (retention: catalog version 2; the bound host: version 3);
#: version 1 is frozen without them.
_RETENTION_COLUMNS = ("compacted_at_ms", "compactable_from_ms", "bound_host")
COLUMNS: tuple[str, ...] = tuple(catalog_columns())
_PK = ("world_id", "kind", "activity_id")
_PK_AT = tuple(COLUMNS.index(c) for c in _PK)
REDERIVE_PAGE = 1000


def _activities_v1() -> str:
    cols = []
    for c in COLUMNS:
        if c in _RETENTION_COLUMNS:
            continue
        kind = "TEXT" if c in TEXT_COLUMNS else "BIGINT"
        cols.append(f"{c} {kind}{' NOT NULL' if c in _NOT_NULL else ''}")
    return (
        "CREATE TABLE activities (\n  "
        + ",\n  ".join(cols)
        + ",\n  PRIMARY KEY (world_id, kind, activity_id)\n)"
    )


def rederive(cur: psycopg.Cursor[Any]) -> int:
    """Recompute every row's derived columns through the core; return how many changed."""
    select = (
        f"SELECT {', '.join(COLUMNS)} FROM activities WHERE ({', '.join(_PK)}) > (%s, %s, %s)"
        f" ORDER BY {', '.join(_PK)} LIMIT {REDERIVE_PAGE}"
    )
    after: tuple[Any, ...] = ("", "", "")
    changed = 0
    while True:
        rows = cur.execute(select, after).fetchall()
        for row in rows:
            try:
                new = catalog_derive_row(tuple(row))
            except CatalogStorageError as e:
                key = tuple(row[i] for i in _PK_AT)
                raise CatalogStorageError(f"cannot migrate catalog row {key}: {e}") from e
            cols = [COLUMNS[i] for i in compress(range(len(COLUMNS)), map(ne, row, new))]
            if cols:
                cur.execute(
                    f"UPDATE activities SET {', '.join(f'{c} = %s' for c in cols)}"
                    " WHERE world_id = %s AND kind = %s AND activity_id = %s",
                    [new[COLUMNS.index(c)] for c in cols] + [row[i] for i in _PK_AT],
                )
                changed += 1
        if len(rows) < REDERIVE_PAGE:
            return changed
        last = rows[-1]
        after = tuple(last[i] for i in _PK_AT)


# (version, statements). Append only: a released migration never changes.
Migration = tuple[int, tuple[str, ...]]

CATALOG_MIGRATIONS: tuple[Migration, ...] = (
    (
        1,
        (
            _activities_v1(),
            "CREATE INDEX activities_claimable ON activities"
            " (claimable_from_ms, kind, world_id, activity_id)"
            " WHERE claimable_from_ms IS NOT NULL",
            "CREATE INDEX activities_pending_observation ON activities"
            " (world_id, kind, activity_id) WHERE pending_observation = 1",
            "CREATE INDEX activities_awaiting_decision ON activities"
            " (world_id, kind, activity_id) WHERE awaiting_decision = 1",
            "CREATE INDEX activities_unsettled ON activities (world_id) WHERE unsettled = 1",
            "CREATE TABLE catalog_clock"
            " (id INTEGER PRIMARY KEY CHECK (id = 1), boot_id TEXT NOT NULL)",
            "INSERT INTO catalog_clock (id, boot_id) VALUES (1, '')",
        ),
    ),
    (
        2,
        (
            "ALTER TABLE activities ADD COLUMN compacted_at_ms BIGINT",
            "ALTER TABLE activities ADD COLUMN compactable_from_ms BIGINT",
            "CREATE INDEX activities_compactable ON activities"
            " (compactable_from_ms, world_id, kind, activity_id)"
            " WHERE compactable_from_ms IS NOT NULL",
        ),
    ),
    (
        3,
        (
            "ALTER TABLE activities ADD COLUMN bound_host TEXT NOT NULL DEFAULT ''",
            "DROP INDEX activities_claimable",
            "CREATE INDEX activities_claimable ON activities"
            " (claimable_from_ms, kind, world_id, activity_id, bound_host)"
            " WHERE claimable_from_ms IS NOT NULL",
        ),
    ),
    (
        4,
        (
            "CREATE TABLE artifacts (hexdigest TEXT PRIMARY KEY, size BIGINT NOT NULL,"
            " data BYTEA NOT NULL)",
        ),
    ),
)
#: Versions after whose statements every row's derived columns are recomputed by the core
#: (once, after every pending statement: the core decodes exactly the latest layout).
REDERIVE: dict[str, frozenset[int]] = {"catalog": frozenset({2}), "world": frozenset()}
_REDERIVERS: dict[str, Callable[[psycopg.Cursor[Any]], int]] = {"catalog": rederive}

WORLD_MIGRATIONS: tuple[Migration, ...] = (
    (
        1,
        (
            """CREATE TABLE worlds (
    world_id         TEXT PRIMARY KEY,
    run_id           TEXT NOT NULL,
    head_tick        BIGINT NOT NULL,
    head_token       TEXT NOT NULL,
    writer_epoch     BIGINT NOT NULL DEFAULT 0,
    post_commit_tick BIGINT NOT NULL,
    close_state      TEXT NOT NULL DEFAULT 'open',
    close_sticky     BOOLEAN NOT NULL DEFAULT false,
    forked_from      TEXT,
    forked_at_tick   BIGINT
)""",
            """CREATE TABLE ticks (
    world_id     TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    tick         BIGINT NOT NULL,
    committed_ms BIGINT NOT NULL,
    PRIMARY KEY (world_id, run_id, tick)
)""",
            """CREATE TABLE tick_tokens (
    world_id TEXT NOT NULL,
    run_id   TEXT NOT NULL,
    tick     BIGINT NOT NULL,
    token    TEXT NOT NULL,
    PRIMARY KEY (world_id, run_id, tick, token)
)""",
            """CREATE TABLE visibility (
    world_id TEXT NOT NULL,
    token    TEXT NOT NULL,
    PRIMARY KEY (world_id, token)
)""",
            """CREATE TABLE components (
    world_id  TEXT NOT NULL,
    run_id    TEXT NOT NULL,
    entity    TEXT NOT NULL,
    component TEXT NOT NULL,
    tick      BIGINT NOT NULL,
    value     TEXT,
    PRIMARY KEY (world_id, run_id, entity, component, tick)
)""",
            "CREATE INDEX components_by_tick ON components (world_id, run_id, tick)",
        ),
    ),
)

MIGRATIONS: dict[str, tuple[Migration, ...]] = {
    "catalog": CATALOG_MIGRATIONS,
    "world": WORLD_MIGRATIONS,
}


def latest(store: str) -> int:
    return MIGRATIONS[store][-1][0]


def _has_version_table(cur: psycopg.Cursor[Any]) -> bool:
    row = cur.execute("SELECT to_regclass('tether_schema_version') IS NOT NULL").fetchone()
    return bool(row and row[0])


def version_of(cur: psycopg.Cursor[Any], store: str) -> int:
    """The store's schema version in the current search path (0: none yet)."""
    if not _has_version_table(cur):
        return 0
    row = cur.execute(
        "SELECT version FROM tether_schema_version WHERE store = %s", (store,)
    ).fetchone()
    return 0 if row is None else int(row[0])


#: The tables each store holds at its latest version (besides `tether_schema_version`).
STORE_TABLES: dict[str, tuple[str, ...]] = {
    "catalog": ("activities", "catalog_clock", "artifacts"),
    "world": ("worlds", "ticks", "tick_tokens", "visibility", "components"),
}


#: The tables that make a schema with no version record of the store read as that store with
#: its record gone (one table of a common name could be another application's).
MARKER_TABLES: dict[str, tuple[str, ...]] = {
    "catalog": ("activities", "catalog_clock"),
    "world": ("worlds", "tick_tokens"),
}


def tables_missing(cur: psycopg.Cursor[Any], names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``names`` the schema the stores are made in (`current_schema()`) lacks, in
    their order (a table of the name elsewhere on the search path is not the store's)."""
    rows = cur.execute(
        "SELECT t FROM unnest(%s::text[]) WITH ORDINALITY AS x(t, i)"
        " WHERE to_regclass(quote_ident(current_schema()) || '.' || quote_ident(t)) IS NULL"
        " ORDER BY i",
        (list(names),),
    ).fetchall()
    return tuple(str(r[0]) for r in rows)


def damaged(cur: psycopg.Cursor[Any], store: str, found: int) -> tuple[str, ...] | None:
    """How a store's version and tables disagree: the tables its latest version lacks, or ()
    for its marker tables there with no version record; None when they agree. An older
    version (which the upgrade brings forward) is not judged: it holds its own tables."""
    if found == latest(store):
        missing = tables_missing(cur, STORE_TABLES[store])
        return missing or None
    if found == 0 and not tables_missing(cur, MARKER_TABLES[store]):
        return ()
    return None


def check_tables(cur: psycopg.Cursor[Any], store: str, found: int, where: str) -> None:
    """Refuse a store whose version and tables disagree (`StoreDamaged`)."""
    missing = damaged(cur, store, found)
    if missing is not None:
        raise StoreDamaged(store, where, missing, found)


def outdated(store: str, found: int, url_hint: str, url: str | None = None) -> SchemaOutdated:
    """The refusal of a store of an older schema; with ``url``, its command names it (its
    passwords masked, quoted for a shell) so it can be copied."""
    new = latest(store)
    target = "URL" if url is None else shlex.quote(redact(url))
    masked = url is not None and redact(url) != url
    return SchemaOutdated(
        f"the {store} schema at {url_hint} is version {found}, this Tether needs {new}:"
        f" stop every Tether process using it, then run `tether db upgrade {target}`"
        + (
            " (its password masked here: give it by PGPASSWORD or a password file)"
            if masked
            else ""
        ),
        store,
        found,
        new,
    )


def _wait_for_locks(
    cur: psycopg.Cursor[Any], lock: str, keys: tuple[int, ...], store: str, where: str
) -> None:
    """Inside a transaction: take the advisory locks ``keys`` with ``lock``
    (``pg_advisory_xact_lock``, or ``pg_advisory_lock``: held past the transaction), waiting
    up to `MIGRATION_LOCK_TIMEOUT_MS` for another process creating or migrating the stores
    (the session's own `lock_timeout` and `statement_timeout` are for row locks and
    statements, and apply again after).

    Raises:
        MigrationLockTimeout: another process held one that long; nothing was written.
    """
    wait_ms = MIGRATION_LOCK_TIMEOUT_MS
    before = cur.execute(
        "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')"
    ).fetchone()
    # The statement's own timeout a little later than the lock's: the lock's fires first.
    cur.execute(
        "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)",
        (f"{wait_ms}ms", f"{wait_ms + 5_000}ms"),
    )
    try:
        for key in keys:
            cur.execute(f"SELECT {lock}(%s)", (key,))
    except psycopg.errors.LockNotAvailable:
        raise MigrationLockTimeout(
            "migration_lock_timeout",
            f"another process kept creating or migrating the {store} at {where} for more than"
            f" {wait_ms / 1000:g} s (its schema lock): nothing was written; run this again once"
            " it is done",
            details={"store": store, "where": where, "waited_ms": wait_ms},
        ) from None
    if before is not None:
        cur.execute(
            "SELECT set_config('lock_timeout', %s, true),"
            " set_config('statement_timeout', %s, true)",
            before,
        )


def lock_upgrades(cur: psycopg.Cursor[Any], where: str) -> None:
    """Inside a transaction: hold `UPGRADE_KEY` for the rest of the session (`tether db
    upgrade`), waiting for another upgrade of the database to end (`_wait_for_locks`)."""
    _wait_for_locks(cur, "pg_advisory_lock", (UPGRADE_KEY,), "stores", where)


def search_path_names(path: str, user: str) -> list[tuple[str, bool]]:
    """The schemas a ``search_path`` setting names, in order, as the server reads them:
    comma-separated; a quoted name kept as written (``""`` a quote in it), an unquoted one
    folded to lower case; ``$user`` (quoted or not) the session's ``user``. Each with whether
    it was ``$user``."""
    names: list[tuple[str, bool]] = []
    i, n = 0, len(path)
    while i < n:
        while i < n and path[i].isspace():
            i += 1
        if i >= n:
            break
        if path[i] == '"':
            j, chars = i + 1, []
            while j < n:
                if path[j] == '"':
                    if j + 1 < n and path[j + 1] == '"':
                        chars.append('"')
                        j += 2
                        continue
                    break
                chars.append(path[j])
                j += 1
            name, i = "".join(chars), j + 1
        else:
            j = i
            while j < n and path[j] != ",":
                j += 1
            name, i = path[i:j].strip().lower(), j
        while i < n and path[i] != ",":
            i += 1
        i += 1  # past the comma
        if name == "$user":
            names.append((user, True))
        elif name:
            names.append((name, False))
    return names


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _denied(path: str, schema: str, message: str) -> SchemaDenied:
    """`schema_denied` of `schema` under the search path `path` (the server refused the role
    a right on it: `message` names the right and the GRANT)."""
    return SchemaDenied(
        "schema_denied", message, details={"search_path": path, "schemas": [schema]}
    )


def check_search_path(cur: psycopg.Cursor[Any], where: str) -> None:
    """Refuse a search path under which this role cannot read or make the stores it names:
    one whose first schema that exists is one this role may not use (`SchemaDenied`, code
    ``schema_denied``: its stores are invisible to the role, which would otherwise read
    "none there", or work in a later schema of the path), or one naming no schema the server
    has (`NoSuchSchema`, code ``no_such_schema``). A ``$user`` schema the role may not use is
    skipped, as the server skips it."""
    row = cur.execute(
        "SELECT current_schema(), current_setting('search_path'), current_user"
    ).fetchone()
    assert row is not None
    current, path, user = row[0], str(row[1]), str(row[2])
    named = search_path_names(path, user)
    found = dict(
        cur.execute(
            "SELECT nspname, has_schema_privilege(oid, 'USAGE') FROM pg_namespace"
            " WHERE nspname = ANY(%s)",
            ([name for name, _ in named],),
        ).fetchall()
    )
    at = where if "(search_path " in where else f"{where} (search_path {path})"
    for name, is_user in named:
        if name not in found:
            continue  # not there: the server looks further
        if found[name]:
            return  # the first schema the role may use: where its stores are
        if not is_user:
            raise _denied(
                path,
                name,
                f"the search path at {at} names schema {name}, which this role may not use:"
                f" GRANT USAGE ON SCHEMA {_quoted(name)} TO the role, or connect as one that"
                " may",
            )
    if current is not None:
        return  # a schema the walk above did not name (the server's own reading wins)
    raise NoSuchSchema(
        "no_such_schema",
        f"the search path at {at} names no schema the server has: create it"
        " (CREATE SCHEMA ...) or fix the URL's options=-csearch_path=...",
        details={"search_path": path},
    )


def check_may_create(cur: psycopg.Cursor[Any], where: str) -> None:
    """Refuse to create a store in a schema this role may not create tables in
    (`SchemaDenied`, code ``schema_denied``, as for a schema it may not use: the server
    refused). PostgreSQL 15 grants no role but its owner CREATE on ``public``, so a role
    given a database and nothing else lands here; the refusal names the schema and both ways
    out."""
    row = cur.execute(
        "SELECT current_schema(), has_schema_privilege(current_schema(), 'CREATE'),"
        " current_setting('search_path')"
    ).fetchone()
    if row is None or row[0] is None or row[1]:
        return  # no schema at all is `check_search_path`'s to refuse
    name, path = str(row[0]), str(row[2])
    at = where if "(search_path " in where else f"{where} (search_path {path})"
    raise _denied(
        path,
        name,
        f"the stores at {at} would be created in schema {name}, where this role may not create"
        f" tables: GRANT CREATE ON SCHEMA {_quoted(name)} TO the role, or name a schema it owns"
        " in the URL (options=-csearch_path=NAME)",
    )


def ensure(
    cur: psycopg.Cursor[Any], store: str, where: str, *, upgrade: bool, url: str | None = None
) -> int:
    """Inside a transaction: create a fresh store at the latest version, or (``upgrade``)
    apply pending migrations; refuse an older version otherwise and a newer one always.
    Another process creating or migrating it is waited for (`MIGRATION_LOCK_TIMEOUT_MS`,
    else `MigrationLockTimeout`). Returns the version found."""
    check_search_path(cur, where)  # stores in a schema the role may not see are not "none"
    new = latest(store)
    found = version_of(cur, store)
    if found == new:
        check_tables(cur, store, found, where)
        return found
    keys = (_VERSION_TABLE_KEY, _LOCK_KEYS[store])
    _wait_for_locks(cur, "pg_advisory_xact_lock", keys, store, where)
    if version_of(cur, store) == 0:  # still none, under the lock: this role would create it
        check_may_create(cur, where)
    cur.execute(VERSION_TABLE)
    found = version_of(cur, store)  # another process may have migrated while we waited
    if found > new:
        raise SchemaOutdated.newer(store, found, new, where)
    if found in (0, new):  # none yet, or made while we waited: its tables say which
        check_tables(cur, store, found, where)
        if found == new:
            return found
    if 0 < found < new and not upgrade:
        raise outdated(store, found, where, url)
    needs_rederive = False
    for version, statements in MIGRATIONS[store]:
        if version > found:
            for statement in statements:
                cur.execute(statement)
            needs_rederive = needs_rederive or (found > 0 and version in REDERIVE[store])
    if store == "catalog":
        cur.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'activities' AND table_schema = current_schema()"
        )
        if {r[0] for r in cur.fetchall()} != set(COLUMNS):
            raise CatalogStorageError(
                "the activities table does not match the core's column layout"
            )
    if needs_rederive:
        _REDERIVERS[store](cur)
    cur.execute(
        "INSERT INTO tether_schema_version (store, version) VALUES (%s, %s)"
        " ON CONFLICT (store) DO UPDATE SET version = excluded.version",
        (store, new),
    )
    return found
