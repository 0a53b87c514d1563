"""Fixtures for the world tests: the crash matrix's journal provider is importable here too."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
