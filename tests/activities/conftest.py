"""Fixtures for catalog tests: a real SQLite file per test and a settable clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tether.activities import Catalog

from tests.activities.support import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'catalog.db'}"


@pytest.fixture
def catalog(db_url: str, clock: ManualClock) -> Iterator[Catalog]:
    with Catalog.open(db_url, clock=clock) as cat:
        yield cat
