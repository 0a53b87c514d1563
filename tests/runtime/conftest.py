"""Fixtures for the runtime tests: the crash matrix's journal provider and a manual clock."""

from __future__ import annotations

import sys
from pathlib import Path

# The journal provider lives with the crash matrix; the runtime tests reuse it in-process.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
