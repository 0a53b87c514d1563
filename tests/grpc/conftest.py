"""The gRPC tests reuse the DYNAMIXEL tests' emulator and host configuration helpers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collections.abc import Iterator

import pytest
from _dxl_setup import EmulatorProcess, emulator_process


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[EmulatorProcess]:
    """The DYNAMIXEL emulator (its own process, a real pty) for one test."""
    with emulator_process(tmp_path) as emulator:
        yield emulator
