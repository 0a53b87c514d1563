"""The usage example in `tether.runtime`'s docstring runs as a test."""

from __future__ import annotations

import doctest

import tether.runtime


def test_runtime_docstring_example_runs() -> None:
    result = doctest.testmod(tether.runtime, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted >= 9 and result.failed == 0
