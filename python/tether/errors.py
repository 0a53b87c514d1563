"""Tether's exception hierarchy, created in Rust (`tether._core`) and re-exported here."""

from tether._core import TetherError

# --- patch ---


# --- agui ---


# --- catalog ---


# --- codec ---


__all__ = ["TetherError"]  # each section above extends this list: __all__ += [...]
