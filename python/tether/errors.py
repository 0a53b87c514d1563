"""Tether's exception hierarchy, created in Rust (`tether._core`) and re-exported here."""

from tether._core import TetherError

# --- patch ---


# --- agui ---


# --- catalog ---


# --- codec ---
# isort: split
# `__all__` is only assigned at the end of this file, so this section re-exports explicitly
# (`X as X`) instead of extending it; the names are importable from `tether.errors` either way.
from tether._core import DxlError as DxlError
from tether._core import DxlFrameError as DxlFrameError
from tether._core import DxlUsageError as DxlUsageError

__all__ = ["TetherError"]  # each section above extends this list: __all__ += [...]
