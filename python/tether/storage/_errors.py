"""Storage errors born in Python: a commit whose outcome is unknown, an out-of-date schema, a
migration lock another process holds too long, one SQLite file named for two stores; and
`with_code`, which gives a backend's error a stable code."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, TypeVar

from tether._coded import CodedError
from tether._core import CatalogStorageError, TetherError

E = TypeVar("E", bound=BaseException)


def with_code(exc: E, code: str) -> E:
    """``exc`` carrying the stable ``code`` (`tether._exit.ERROR_CODES`), its message
    unchanged: for the error classes that take a message only (the Rust core's
    `CatalogStorageError`, `WorldError`, a caller's own), so a failure to open a store is
    classified the same whichever store and command it came from."""
    exc.code = code  # type: ignore[attr-defined]
    return exc


class CommitUnknown(CatalogStorageError):
    """A COMMIT was sent and its reply was lost (the connection broke): the transaction may or
    may not have landed. Nothing may act on either guess: re-read the record first
    (`tether.activities.Catalog.committed`).

    Attributes:
        key: (world_id, kind, activity_id) of the row the transaction wrote, if known.
        intended: the exact row the transaction would have stored, if known.
    """

    def __init__(
        self,
        message: str,
        key: tuple[str, str, str] | None = None,
        intended: tuple[Any, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.intended = intended


class StoreDamaged(TetherError):
    """A store whose tables are not all there (dropped by hand, say): its version says one
    thing, its tables another, so it is neither opened nor upgraded (code `store_damaged`,
    `tether._exit.STORE_UNUSABLE`). Nothing was written to it.

    Attributes:
        store: ``catalog`` or ``world``.
        missing: the tables it lacks (empty: its version record is what is missing).
    """

    code = "store_damaged"

    def __init__(self, store: str, where: str, missing: tuple[str, ...], found: int) -> None:
        if missing:
            message = (
                f"the {store} at {where} is damaged: its table(s) {', '.join(missing)} are"
                f" missing (its version says {found}); nothing was written to it: restore it"
                " from a backup"
            )
        else:
            message = (
                f"the {store} at {where} holds its tables but no schema version: a store whose"
                " version record is gone (restore it from a backup) or another application's"
                " tables of those names (use another database or schema); nothing was written"
            )
        super().__init__(message)
        self.store = store
        self.where = where
        self.missing = missing
        self.message = message
        self.details = {"store": store, "missing": list(missing), "found": found}

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.store, self.where, self.missing, self.details["found"])


def damage_of(
    present: Collection[str],
    tables: Sequence[str],
    found: int,
    latest: int,
    marker: Sequence[str],
) -> tuple[str, ...] | None:
    """How a SQLite store's version and its tables (``present``) disagree, the rule every
    SQLite open and `tether db status` applies: at ``latest`` the ``tables`` it lacks, with no
    version (``found`` 0) ``()`` when one of its ``marker`` tables is there; None when they
    agree (an older version, which the upgrade brings forward, is not judged)."""
    missing = tuple(t for t in tables if t not in present)
    if found == latest and missing:
        return missing
    if found == 0 and any(t in present for t in marker):
        return ()
    return None


class SchemaOutdated(TetherError):
    """The database (catalog or world ledger, either backend) holds an older Tether schema:
    `tether db upgrade URL` brings it forward (or, PostgreSQL, a newer one: upgrade Tether).
    Nothing was written to it.

    Attributes:
        store: ``catalog`` or ``world``.
        found: the schema version found.
        latest: the version this Tether needs.
        code: ``migration_needed`` (older), ``catalog_newer`` or ``world_newer`` (newer): a
            store that cannot be used as it is (`tether._exit.STORE_UNUSABLE`).
        message: the one line (as ``str(err)``); details: store, found and latest.
    """

    def __init__(self, message: str, store: str, found: int, latest: int) -> None:
        super().__init__(message)
        self.store = store
        self.found = found
        self.latest = latest
        self.code = "migration_needed" if found < latest else f"{store}_newer"
        self.message = message
        self.details = {"store": store, "found": found, "latest": latest}

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message, self.store, self.found, self.latest)

    @classmethod
    def newer(cls, store: str, found: int, latest: int, where: str) -> SchemaOutdated:
        """The refusal of a ``store`` schema newer than this Tether's (``latest``), either
        backend: code ``catalog_newer`` or ``world_newer``."""
        return cls(
            f"the {store} schema at {where} is version {found}, newer than this Tether"
            f" supports ({latest}); upgrade Tether",
            store,
            found,
            latest,
        )


class MigrationLockTimeout(CodedError):
    """Another process kept creating or migrating the stores of a database (its advisory lock)
    longer than this one would wait (`tether.storage._pg_schema.MIGRATION_LOCK_TIMEOUT_MS`):
    nothing was written; run the same command again once it is done. Code
    ``migration_lock_timeout``; details: ``store``, ``where`` and ``waited_ms``."""


class NoSuchSchema(CodedError):
    """The URL's search path names no schema the server has, so a store would have nowhere to
    be created (a usage error: create the schema or fix the URL). Code ``no_such_schema``;
    details: ``search_path``."""


class SchemaDenied(CodedError):
    """The URL's search path names a schema this role may not use (no USAGE): its stores are
    invisible to the role, so it can neither read them nor tell that none are there (the
    server refused: grant the right or use another role). Code ``schema_denied``; details:
    ``search_path`` and ``schemas``."""


class SameStoreFile(CodedError):
    """The catalog and the world ledger were given one SQLite file: a SQLite file holds one
    store. Refused before either is opened (a usage error). Code ``same_store_file``; details:
    ``path`` (and ``holds``, the store the file already holds, when refused by
    `tether db upgrade --store`)."""


class MixedStores(CodedError):
    """One store on PostgreSQL (shared by hosts) and the other a file of this host: refused
    before either is opened (a usage error). Code ``mixed_stores``; details: ``shared``,
    ``local`` (the stores' names)."""


def other_store(where: str, holds: str) -> SameStoreFile:
    """The refusal of a SQLite file at ``where`` that holds the other store (``holds``:
    ``catalog`` or ``world``) than the one opened on it: `same_store_file`, before anything is
    written to it, rather than the other store's schema version read as this one's."""
    from tether.storage._urls import sqlite_path  # it imports this module

    held, wanted = (
        ("a catalog", "a world ledger") if holds == "catalog" else ("a world ledger", "a catalog")
    )
    return SameStoreFile(
        "same_store_file",
        f"{where} holds {held}, not {wanted}: the catalog and the world ledger must be"
        " different files",
        details={"path": sqlite_path(where.removeprefix("sqlite://")) or where, "holds": holds},
    )
