"""The usage example in the `tether.activities` docstring runs and stays true."""

from __future__ import annotations

import doctest

import tether.activities


def test_the_package_docstring_example_runs() -> None:
    outcome = doctest.testmod(tether.activities, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 10
    assert outcome.failed == 0
