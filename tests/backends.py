"""The storage backends tests run on, and the URLs of a data directory's stores on each.

`tests/conftest.py` picks the backend (fixture `backend`, and `host_backend` for tests that
build Hosts with `hosttools.make_host`); helpers here turn it into catalog and world URLs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BACKENDS = ("sqlite", "postgres")

#: For a test that takes `backend` (or `store_url`) whose PostgreSQL run is a slow sweep: it runs
#: on SQLite by default and on both with TETHER_SLOW=1 (`tests/conftest.py` skips `slow`).
SLOW_ON_POSTGRES = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)]
)

#: Set by the `host_backend` fixture while a PostgreSQL-parametrised test runs: a data dir ->
#: the URL of a PostgreSQL schema of its own (the same dir gives the same schema). None: SQLite.
schema_for_dir: Callable[[Path], str] | None = None


def catalog_url_for(store_url: str) -> str:
    """The catalog URL of a `store_url` (SQLite: `catalog.db` in the directory)."""
    return f"{store_url}/catalog.db" if store_url.startswith("sqlite://") else store_url


def world_url_for(store_url: str) -> str:
    """The world ledger URL of a `store_url` (SQLite: `world.db` in the directory)."""
    return f"{store_url}/world.db" if store_url.startswith("sqlite://") else store_url


def empty_catalog(url: str) -> None:
    """Empty the catalog tables of the PostgreSQL schema at ``url`` (when they exist), so the
    next catalog opened there starts as fresh as on a new SQLite file."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        made = conn.execute("SELECT to_regclass('activities') IS NOT NULL").fetchone()
        if made is not None and made[0]:
            conn.execute("DELETE FROM activities")  # a few rows: cheaper than TRUNCATE
            conn.execute("UPDATE catalog_clock SET boot_id = ''")
            shared = conn.execute("SELECT to_regclass('artifacts') IS NOT NULL").fetchone()
            if shared is not None and shared[0]:
                conn.execute("DELETE FROM artifacts")


#: The world ledger's tables on PostgreSQL (emptied by `empty_stores`).
WORLD_TABLES = ("components", "visibility", "tick_tokens", "ticks", "worlds")


def empty_stores(url: str) -> None:
    """Empty the catalog's and the world ledger's tables of the PostgreSQL schema at ``url``
    (the ones that exist), as if both stores were new."""
    import psycopg

    empty_catalog(url)
    with psycopg.connect(url, autocommit=True) as conn:
        for table in WORLD_TABLES:
            made = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
            if made is not None and made[0]:
                conn.execute(f"DELETE FROM {table}")


def fresh_catalog_url(store_url: str, name: str) -> str:
    """The URL of an empty catalog named ``name`` on the test's backend: a new SQLite file
    ``name.db`` in the directory, or the test's PostgreSQL schema, emptied."""
    if store_url.startswith("sqlite://"):
        return f"{store_url}/{name}.db"
    empty_catalog(store_url)
    return store_url


@contextmanager
def pg_schema(base: str) -> Iterator[str]:
    """A fresh PostgreSQL schema at ``base`` (a URL restricted to it), dropped afterwards: for
    a module whose many short cases share one schema (`empty_catalog` between them) instead of
    creating the catalog's tables once per case."""
    import psycopg
    from tether.testing._postgres import schema_url

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema_url(base, schema)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '30s'")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
