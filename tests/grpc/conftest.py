"""The gRPC tests reuse the DYNAMIXEL tests' emulator and host configuration helpers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
