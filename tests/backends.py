"""The storage backends tests run on, and the URLs of a data directory's stores on each.

`tests/conftest.py` picks the backend (fixture `backend`, and `host_backend` for tests that
build Hosts with `hosttools.make_host`); helpers here turn it into catalog and world URLs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

BACKENDS = ("sqlite", "postgres")

#: Set by the `host_backend` fixture while a PostgreSQL-parametrised test runs: a data dir ->
#: the URL of a PostgreSQL schema of its own (the same dir gives the same schema). None: SQLite.
schema_for_dir: Callable[[Path], str] | None = None


def catalog_url_for(store_url: str) -> str:
    """The catalog URL of a `store_url` (SQLite: `catalog.db` in the directory)."""
    return f"{store_url}/catalog.db" if store_url.startswith("sqlite://") else store_url


def world_url_for(store_url: str) -> str:
    """The world ledger URL of a `store_url` (SQLite: `world.db` in the directory)."""
    return f"{store_url}/world.db" if store_url.startswith("sqlite://") else store_url
