"""Fixtures for catalog tests: a real catalog per test on each backend (a SQLite file, a
PostgreSQL schema) and a settable clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether.activities import Catalog

from tests.activities.support import ManualClock
from tests.backends import catalog_url_for


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_url(store_url: str) -> str:
    """The catalog URL on the test's backend (every catalog test runs on both)."""
    return catalog_url_for(store_url)


@pytest.fixture
def catalog(db_url: str, clock: ManualClock) -> Iterator[Catalog]:
    with Catalog.open(db_url, clock=clock) as cat:
        yield cat
