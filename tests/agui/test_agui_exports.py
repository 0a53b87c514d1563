"""`tether.agui` exports the errors its API raises and its ERROR_CODES name, as `tether.patch`
does its own: `from tether.agui import AguiError` was an ImportError."""

from __future__ import annotations

import tether.agui as agui
import tether.errors as errors


def test_the_agui_errors_are_exported_where_the_api_lives() -> None:
    for name in (
        "AguiError",
        "AguiDecodeError",
        "AguiMalformedError",
        "AguiSequenceError",
        "AguiAttributionError",
    ):
        assert name in agui.__all__
        assert getattr(agui, name) is getattr(errors, name)
