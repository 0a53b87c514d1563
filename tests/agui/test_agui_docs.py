"""The usage examples in `tether.agui` docstrings run as tests."""

from __future__ import annotations

import doctest

import tether.agui


def test_package_docstring_examples() -> None:
    result = doctest.testmod(tether.agui, raise_on_error=False, report=True)
    assert result.attempted > 0
    assert result.failed == 0
