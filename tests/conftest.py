"""Shared pytest configuration: Hypothesis profiles, the slow-test switch and the storage
backends (SQLite files, a real PostgreSQL with a schema per test)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from tether.testing._postgres import find_server, schema_url

settings.register_profile("fast", max_examples=100, deadline=None)
settings.register_profile(
    "slow", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("slow" if os.environ.get("TETHER_SLOW") else "fast")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slow` run only when TETHER_SLOW=1; each has a sampled fast sibling."""
    if os.environ.get("TETHER_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow sweep: set TETHER_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# --- PostgreSQL: the server at 127.0.0.1:5432, else a throwaway cluster; a schema per test ---

BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="session")
def pg_base() -> Iterator[str]:
    """The PostgreSQL test database's URL (see `tether.testing._postgres.find_server`).

    Skips loudly when there is none; under CI=true that is a failure instead.
    """
    url, cluster, reason = find_server()
    if url is None:
        message = f"PostgreSQL tests cannot run: {reason}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield url
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.fixture
def pg_url(pg_base: str) -> Iterator[str]:
    """A URL whose search path is a fresh schema of its own, dropped after the test."""
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema_url(pg_base, schema)
    finally:
        with psycopg.connect(pg_base, autocommit=True) as conn:
            # A session a test left open holds no lock past its idle timeout.
            conn.execute("SET lock_timeout = '30s'")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend a parametrised test runs on."""
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A catalog/ledger base URL on the test's backend: a SQLite directory URL prefix or a
    PostgreSQL schema. Use `catalog_url_for` / `world_url_for` to get each store's URL."""
    if backend == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite://{tmp_path}"


def catalog_url_for(store_url: str) -> str:
    """The catalog URL of a `store_url` (SQLite: `catalog.db` in the directory)."""
    return f"{store_url}/catalog.db" if store_url.startswith("sqlite://") else store_url


def world_url_for(store_url: str) -> str:
    """The world ledger URL of a `store_url` (SQLite: `world.db` in the directory)."""
    return f"{store_url}/world.db" if store_url.startswith("sqlite://") else store_url
