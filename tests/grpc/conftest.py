"""The gRPC tests reuse the DYNAMIXEL tests' emulator and host configuration helpers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collections.abc import Iterator
from typing import Any

import pytest
from _dxl_setup import EmulatorProcess, emulator_process


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[EmulatorProcess]:
    """The DYNAMIXEL emulator (its own process, a real pty) for one test."""
    with emulator_process(tmp_path) as emulator:
        yield emulator


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Any]:
    """A `Daemon` in this process (`IN_PROCESS_SERVE`) over the emulated arm; closed after."""
    from _grpc_setup import IN_PROCESS_SERVE, in_process

    with in_process(tmp_path, IN_PROCESS_SERVE) as running:
        yield running
