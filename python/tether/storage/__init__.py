"""Catalog storage: a small port and its backends, chosen by URL scheme (`sqlite:///abs/path`,
`postgresql://host/db`)."""

from __future__ import annotations

from collections.abc import Callable

from tether._core import CatalogConfigError
from tether.storage._doorbell import (
    CLAIMABLE,
    RESULT,
    SETTLED,
    Doorbell,
    WakeBell,
    changed_topics,
    wakeup_dir_for,
)
from tether.storage._errors import CommitUnknown, SchemaOutdated, with_code
from tether.storage._port import CatalogStore, KeyTuple, Row, View
from tether.storage._sqlite import SYNCHRONOUS, SqliteCatalogStore
from tether.storage._urls import SQLITE_URL_FORM, redact, sqlite_path, sqlite_url


def _open_sqlite(rest: str, synchronous: str) -> CatalogStore:
    # `sqlite:///abs/path.db`: everything after `sqlite://` is the absolute file path.
    path = sqlite_path(rest)
    if path is None:
        raise with_code(
            CatalogConfigError(
                f"sqlite catalog URLs name an absolute file, without query or fragment:"
                f" {SQLITE_URL_FORM} (got {rest!r})"
            ),
            "bad_url",
        )
    return SqliteCatalogStore(path, synchronous=synchronous)


def _open_postgres(rest: str, synchronous: str) -> CatalogStore:
    # Imported here: psycopg is needed only by PostgreSQL catalogs.
    try:
        from tether.storage._pg import check_url
        from tether.storage._postgres import PostgresCatalogStore
    except ImportError as e:
        raise CatalogConfigError(
            f"PostgreSQL catalogs need psycopg and orjson: pip install 'tether[postgres]' ({e})"
        ) from None

    if synchronous != "FULL":
        raise CatalogConfigError(
            "a PostgreSQL catalog always commits durably (synchronous_commit = on);"
            f" synchronous={synchronous!r} is for SQLite only"
        )
    url = "postgresql://" + rest
    check_url(url, CatalogConfigError)
    return PostgresCatalogStore(url)


# Scheme -> opener.
BACKENDS: dict[str, Callable[[str, str], CatalogStore]] = {
    "sqlite": _open_sqlite,
    "postgresql": _open_postgres,
    "postgres": _open_postgres,
}


def open_store(url: str, *, synchronous: str = "FULL") -> CatalogStore:
    """Open the catalog store a URL names (a URL no backend takes: `CatalogConfigError`, code
    `bad_url`)."""
    if not isinstance(url, str):
        raise CatalogConfigError(f"catalog URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    opener = BACKENDS.get(scheme.lower()) if sep else None
    if opener is None:
        raise with_code(
            CatalogConfigError(
                f"unsupported catalog URL {redact(url)!r}; supported schemes: {sorted(BACKENDS)}"
            ),
            "bad_url",
        )
    if not isinstance(synchronous, str):
        raise CatalogConfigError(f"synchronous must be a string, not {type(synchronous).__name__}")
    return opener(rest, synchronous.upper())


__all__ = [
    "BACKENDS",
    "CLAIMABLE",
    "RESULT",
    "SETTLED",
    "SYNCHRONOUS",
    "CatalogStore",
    "CommitUnknown",
    "SchemaOutdated",
    "Doorbell",
    "KeyTuple",
    "Row",
    "SqliteCatalogStore",
    "View",
    "WakeBell",
    "changed_topics",
    "open_store",
    "sqlite_url",
    "wakeup_dir_for",
]
