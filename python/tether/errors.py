"""Tether's exception hierarchy, created in Rust (`tether._core`) and re-exported here."""

from tether._core import TetherError

# --- patch ---


# --- agui ---
# isort: split
# `__all__` is only assigned at the end of this file, so this section re-exports explicitly
# (`X as X`) instead of extending it; the names are importable from `tether.errors` either way.
from tether._core import AguiAttributionError as AguiAttributionError
from tether._core import AguiDecodeError as AguiDecodeError
from tether._core import AguiError as AguiError
from tether._core import AguiMalformedError as AguiMalformedError
from tether._core import AguiSequenceError as AguiSequenceError

# --- catalog ---


# --- codec ---


__all__ = ["TetherError"]  # each section above extends this list: __all__ += [...]
