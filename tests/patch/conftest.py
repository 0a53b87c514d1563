"""Fixtures for the patch tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from patch_json import json_same


@pytest.fixture
def same() -> Callable[[Any, Any], bool]:
    """Exact JSON comparison (True is not 1, key order ignored), as a fixture."""
    return json_same
