"""The console tests drive a real `tether serve` (a subprocess) over the DYNAMIXEL emulator (a
separate process on a pty); they reuse the robot-move tests' setup (tests/adapters)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))
