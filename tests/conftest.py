"""Shared pytest configuration: Hypothesis profiles and the slow-test switch."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

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
