"""Kept for callers of the old path: `tether host` and `tether stop` are generic
(`tether.devices.cli`)."""

from __future__ import annotations

from tether.devices.cli import main, render_stop, stop_main

__all__ = ["main", "render_stop", "stop_main"]
