"""Tether: a physical-AI hardware bridge between a planner's committed world state and robots."""

from tether._core import __version__
from tether.errors import TetherError

__all__ = ["TetherError", "__version__"]
