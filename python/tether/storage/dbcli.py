"""The schema versions of Tether's stores: `status` and `upgrade`, which `tether db status URL`
and `tether db upgrade URL` run (the command line is `tether.activities.dbcli`, the one
`tether db` dispatcher, with `prune`).

Usage:
  tether db status URL [--json]     every Tether store at URL, its version and the latest
  tether db upgrade URL [--store catalog|world] [--json]
                                    apply pending migrations (stop every Tether process
                                    using the store first: their leases go with them)

URL is ``sqlite:///abs/path.db`` (one file holds one store: a catalog or a world ledger) or
``postgresql://host/db`` (a database, or a schema with ``options=-csearch_path%3DNAME``, may
hold both). Credentials come from the environment (PGPASSWORD) or a password file
(PGPASSFILE), never the URL, and are never printed.

A store whose schema is older than this Tether refuses to open and names `tether db upgrade`;
`upgrade` on a location holding no store creates the store named by ``--store`` (PostgreSQL:
both, unless ``--store``). A SQLite file holds one store: ``--store`` naming the other one
than the file holds is a usage error (`same_store_file`), nothing written. Two upgrades of
one PostgreSQL database at once run one after the other (the second waits up to
`tether.storage._pg_schema.MIGRATION_LOCK_TIMEOUT_MS`, else `migration_lock_timeout`), and
each reports the stores as they are after it.

Exit codes (`tether._exit`): 0 done (status: every store is current), 1 a store needs
`upgrade` (status) or the upgrade failed (also a refused login, `login_refused`), 2 usage (a
bad URL, a database the server does not have, a SQLite file that does not exist), 5 a store
that cannot be used, 7 a server that cannot be reached (one line naming the host and the
cause).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote

from tether.errors import TetherError
from tether.storage._errors import SameStoreFile, damage_of
from tether.storage._urls import SQLITE_URL_FORM, redact, sqlite_path

STORES = ("catalog", "world")


@dataclass(frozen=True)
class StoreStatus:
    """One store's schema: the version found (0: none) and the version this Tether needs."""

    store: str
    version: int
    latest: int
    #: Tables its version needs that are not there (or, version 0, its tables are there but
    #: no version): `damaged`, which no command opens or upgrades (`StoreDamaged`).
    missing: tuple[str, ...] = ()
    damaged: bool = False

    @property
    def state(self) -> str:
        if self.damaged:
            return "damaged"
        if self.version == 0:
            return "absent"
        if self.version < self.latest:
            return "needs upgrade"
        return "newer than this Tether" if self.version > self.latest else "current"


def _latest(store: str, backend: str) -> int:
    if backend == "sqlite":
        if store == "catalog":
            from tether.storage._schema import LATEST

            return LATEST
        from tether.world._sqlite import SCHEMA_VERSION

        return SCHEMA_VERSION
    from tether.storage._pg_schema import latest

    return latest(store)


def _sqlite_path(url: str) -> str:
    path = sqlite_path(url.partition("://")[2])
    if path is None:
        raise UrlError(f"sqlite URLs name an absolute file: {SQLITE_URL_FORM} (got {url!r})")
    return "/" + path.lstrip("/")  # sqlite:////abs too, as the stores themselves read it


def check_exists(url: str) -> None:
    """A SQLite URL naming no file is a usage error (`no_such_database`, as a PostgreSQL
    database the server does not have): a mistyped path, which `status` would otherwise
    report as a store to upgrade (exit 1). Nothing is created."""
    import os

    if _scheme(url) == "sqlite":
        path = _sqlite_path(url)
        if not os.path.lexists(path):
            raise UrlError(f"{redact(url)}: no such file (no SQLite database)", "no_such_database")


def _sqlite_status(path: str) -> list[StoreStatus]:
    import os

    if not os.path.exists(path):
        return []
    from tether._sqlite_files import hold_sqlite_file

    # A file cut short is refused before reading it; held while read (tether._sqlite_files).
    hold = hold_sqlite_file(path, what="the store")
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)  # a # or % is a name
        try:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            version = 0
            if "schema_version" in tables:
                row = conn.execute("SELECT version FROM schema_version").fetchone()
                version = 0 if row is None else int(row[0])
        finally:
            conn.close()
    finally:
        hold.release()
    from tether.storage._schema import TABLES as CATALOG_TABLES
    from tether.world._sqlite import TABLES as WORLD_TABLES

    for store, names in (("catalog", CATALOG_TABLES), ("world", WORLD_TABLES)):
        if not any(t in tables for t in names):
            continue  # not this store
        latest = _latest(store, "sqlite")
        if store == "world" and "worlds" in tables:
            version = max(version, 1)  # a ledger from before its version table holds 1
        damage = damage_of(tables, names, version, latest, names)
        return [StoreStatus(store, version, latest, damage or (), damage is not None)]
    return []


def _pg_session(url: str, application: str = "tether-db") -> Any:
    from tether.storage._pg import Session
    from tether.storage._urls import postgres_url

    # The scheme in any case, as the stores take it (libpq reads only lower case).
    return Session(postgres_url(url) or url, DatabaseError, DatabaseError, application=application)


def _pg_versions(session: Any) -> list[StoreStatus]:
    from tether.storage._pg_schema import check_search_path, damaged, version_of

    out = []
    with session.transaction("schema status", snapshot=True) as cur:
        check_search_path(cur, session.where)  # no schema, or one the role may not see into
        for s in STORES:
            version = version_of(cur, s)
            missing = damaged(cur, s, version)
            if version or missing is not None:
                latest = _latest(s, "postgres")
                out.append(StoreStatus(s, version, latest, missing or (), missing is not None))
    return out


def _pg_status(url: str, application: str = "tether-db") -> list[StoreStatus]:
    session = _pg_session(url, application)
    try:
        return _pg_versions(session)
    finally:
        session.close()


def status(url: str, *, application: str = "tether-db") -> list[StoreStatus]:
    """Every Tether store at ``url`` with its schema version. ``application``: the session's
    name on PostgreSQL (`tether.storage._pg.STORE_OF`: a store's own name makes an error name
    that store)."""
    if _scheme(url) == "sqlite":
        return _sqlite_status(_sqlite_path(url))
    return _pg_status(url, application)


def _targets(url: str, found: set[str], store: str | None) -> list[str]:
    """The stores `upgrade` brings forward: ``store``, else every one found (PostgreSQL, none
    found: both)."""
    targets = (
        [store]
        if store
        else sorted(found) or (["catalog", "world"] if _scheme(url) != "sqlite" else [])
    )
    if not targets:
        raise UrlError(
            f"{redact(url)} holds no Tether store: name one with --store catalog|world", "usage"
        )
    return targets


@contextmanager
def _upgrading(path: str) -> Iterator[None]:
    """Hold the upgrade lock of the SQLite file at ``path``: an exclusive `flock` of its
    directory (SQLite's own locks are `fcntl` locks on the file, which this never touches),
    so a second `tether db upgrade` of the file waits, then finds what the first one did."""
    import os

    try:
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield  # no directory to lock: the store's own open refuses the path
        return
    try:
        _flock_within(fd, path)
        yield
    finally:
        os.close(fd)  # releases the lock


def _flock_within(fd: int, path: str) -> None:
    """Take the upgrade lock, waiting as long as a PostgreSQL upgrade waits for its own
    (`MIGRATION_LOCK_TIMEOUT_MS`), else `MigrationLockTimeout` (nothing was written)."""
    from tether._flock import take_exclusive
    from tether.storage._errors import MigrationLockTimeout
    from tether.storage._pg_schema import MIGRATION_LOCK_TIMEOUT_MS

    waited = MIGRATION_LOCK_TIMEOUT_MS
    try:
        take_exclusive(fd, within_s=waited / 1000, every_s=0.05)
    except BlockingIOError:
        raise MigrationLockTimeout(
            "migration_lock_timeout",
            f"another `tether db upgrade` of {path} kept its lock for more than"
            f" {waited / 1000:g} s: nothing was written; run this again once it is done",
            details={"store": "", "where": path, "waited_ms": waited},
        ) from None


def _sqlite_upgrade(url: str, store: str | None) -> tuple[list[StoreStatus], list[StoreStatus]]:
    path = _sqlite_path(url)
    with _upgrading(path):
        before = _sqlite_status(path)
        return before, _sqlite_upgrade_locked(url, path, before, store)


def _sqlite_upgrade_locked(
    url: str, path: str, before: list[StoreStatus], store: str | None
) -> list[StoreStatus]:
    found = {s.store for s in before}
    if store and found and store not in found:  # a file holds one store
        (held,) = found
        raise SameStoreFile(
            "same_store_file",
            f"{redact(url)} holds the {held}, not a {store}: the catalog and the world ledger"
            " must be different files",
            details={"path": path, "holds": held},
        )
    for s in _targets(url, found, store):
        if s == "catalog":
            from tether.storage._sqlite import SqliteCatalogStore

            SqliteCatalogStore(path, upgrade=True).close()
        else:
            from tether.world._sqlite import SqliteLedger

            SqliteLedger.open(path, upgrade=True).close()
    return _sqlite_status(path)


def _pg_upgrade(url: str, store: str | None) -> tuple[list[StoreStatus], list[StoreStatus]]:
    from tether.storage._pg_schema import lock_upgrades
    from tether.storage._postgres import PostgresCatalogStore
    from tether.world._postgres import PostgresLedger

    session = _pg_session(url)
    try:
        # Held until this session closes: another `tether db upgrade` of the database waits
        # here, then finds (and reports) what this one did, not a store half done.
        with session.transaction("schema upgrade lock") as cur:
            lock_upgrades(cur, session.where)
        before = _pg_versions(session)  # read under the lock: what this upgrade found
        for s in _targets(url, {s.store for s in before}, store):
            if s == "catalog":
                PostgresCatalogStore(url, upgrade=True).close()
            else:
                PostgresLedger(url, upgrade=True).close()
        return before, _pg_versions(session)
    finally:
        session.close()


def upgrade(url: str, store: str | None = None) -> list[StoreStatus]:
    """Apply pending migrations to the stores at ``url`` (creating ``store`` if absent); the
    stores as they are after it.

    Raises:
        UrlError: a URL that names no store Tether can use, or a SQLite file of no store
            and no ``store``.
        SameStoreFile: ``store`` is not the store the SQLite file holds.
        MigrationLockTimeout: another upgrade of the PostgreSQL database kept its lock longer
            than `tether.storage._pg_schema.MIGRATION_LOCK_TIMEOUT_MS`.
    """
    return upgrade_from(url, store)[1]


def upgrade_from(url: str, store: str | None = None) -> tuple[list[StoreStatus], list[StoreStatus]]:
    """`upgrade`, and the stores as they were before it, read under the same lock (a second
    upgrade waits for the first, then finds and reports what it made: `unchanged`). With
    ``store``, that store alone is reported, as it alone was upgraded."""
    if _scheme(url) == "sqlite":
        before, after = _sqlite_upgrade(url, store)
    else:
        before, after = _pg_upgrade(url, store)
    if store is not None:
        before = [s for s in before if s.store == store]
        after = [s for s in after if s.store == store]
    return before, after


class UrlError(Exception):
    """A URL that names no store Tether can use (a usage error): its `code` is `bad_url` for a
    URL no backend takes (as the stores' own opens say), `usage` for a store URL that holds
    no store to act on."""

    def __init__(self, message: str, code: str = "bad_url") -> None:
        super().__init__(message)
        self.code = code


class DatabaseError(TetherError):
    """The server at a URL cannot be reached or refuses the session; its `code` says which
    (`unreachable`, `login_refused`, `no_such_database`, `bad_url`: see
    `tether.storage._pg.connect`), none for a session that failed after connecting."""


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("sqlite", "postgresql", "postgres"):
        raise UrlError(
            f"unsupported URL {redact(url)!r}; use sqlite:///abs/path.db or postgresql://host/db"
        )
    return "sqlite" if scheme == "sqlite" else "postgres"


def render(
    url: str, rows: list[StoreStatus], as_json: bool, *, before: dict[str, int] | None = None
) -> str:
    """What `tether db status|upgrade` prints: one JSON object, or one line per store. With
    `before` (an upgrade's: each store's version before it, 0 for none), each store also says
    what the upgrade did: `created`, `upgraded` from a version, or `unchanged`."""
    from tether.storage._urls import redact

    def done(r: StoreStatus) -> str:
        was = (before or {}).get(r.store, 0)
        if was == r.version:
            return "unchanged"
        return "created" if was == 0 else f"upgraded from version {was}"

    if as_json:
        out: list[dict[str, Any]] = [
            {**asdict(r), "state": r.state}
            | ({} if before is None else {"was": before.get(r.store, 0), "upgrade": done(r)})
            for r in rows
        ]
        return json.dumps({"url": redact(url), "stores": out})
    if not rows:
        return f"{redact(url)}: no Tether store"
    return "\n".join(
        f"{r.store:<8} version {r.version} (this Tether: {r.latest})  {r.state}"
        + (f" (missing: {', '.join(r.missing)})" if r.damaged and r.missing else "")
        + (" (no version record)" if r.damaged and not r.missing else "")
        + ("" if before is None else f" ({done(r)})")
        for r in rows
    )
