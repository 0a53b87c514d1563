"""Catalog storage: a small port and its backends, chosen by URL scheme (`sqlite:///abs/path`)."""

from __future__ import annotations

from collections.abc import Callable

from tether._core import CatalogConfigError
from tether.storage._doorbell import (
    CLAIMABLE,
    RESULT,
    SETTLED,
    Doorbell,
    changed_topics,
    wakeup_dir_for,
)
from tether.storage._port import CatalogStore, KeyTuple, Row, View
from tether.storage._sqlite import SYNCHRONOUS, SqliteCatalogStore


def _open_sqlite(rest: str, synchronous: str) -> CatalogStore:
    # `sqlite:///abs/path.db`: everything after `sqlite://` is the absolute file path.
    if not rest.startswith("/") or rest.endswith("/") or "?" in rest or "#" in rest:
        raise CatalogConfigError(
            f"sqlite catalog URLs name an absolute file, without query or fragment:"
            f" sqlite:///abs/path.db (got {rest!r})"
        )
    return SqliteCatalogStore(rest, synchronous=synchronous)


# Scheme -> opener. PostgreSQL can register here later without touching callers.
BACKENDS: dict[str, Callable[[str, str], CatalogStore]] = {"sqlite": _open_sqlite}


def open_store(url: str, *, synchronous: str = "FULL") -> CatalogStore:
    """Open the catalog store a URL names."""
    if not isinstance(url, str):
        raise CatalogConfigError(f"catalog URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    opener = BACKENDS.get(scheme.lower()) if sep else None
    if opener is None:
        raise CatalogConfigError(
            f"unsupported catalog URL {url!r}; supported schemes: {sorted(BACKENDS)}"
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
    "Doorbell",
    "KeyTuple",
    "Row",
    "SqliteCatalogStore",
    "View",
    "changed_topics",
    "open_store",
    "wakeup_dir_for",
]
