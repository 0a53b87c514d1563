"""`tether.errors` re-exports every world and runtime error, all rooted at `TetherError`."""

from __future__ import annotations

import inspect

import tether.errors as errors
import tether.runtime._errors as runtime_errors
import tether.world._errors as world_errors


def test_every_world_and_runtime_error_is_in_tether_errors() -> None:
    for module in (world_errors, runtime_errors):
        classes = [
            c
            for _, c in inspect.getmembers(module, inspect.isclass)
            if c.__module__ == module.__name__
        ]
        assert classes
        for cls in classes:
            assert getattr(errors, cls.__name__) is cls, cls
            assert issubclass(cls, errors.TetherError)
