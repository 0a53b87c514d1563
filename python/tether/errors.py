"""Tether's exception hierarchy, created in Rust (`tether._core`) and re-exported here."""

from tether._core import TetherError

__all__ = ["TetherError"]
