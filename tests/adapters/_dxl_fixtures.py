"""The DYNAMIXEL fixtures, for `tests/adapters/conftest.py` and for test files elsewhere that
import them: a two-servo emulator on a real pty (shafts moving 20x faster than real time), a
host configuration naming it, and the robot_move family on that configuration (its adapter
closed after the test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _dxl_setup import write_config
from tether.adapters.dynamixel.config import HostConfig, load_config
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move.family import RobotMoveAdapter, robot_move_family
from tether.runtime import Family


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator([1, 2], speed_scale=20.0) as emu:
        yield emu


@pytest.fixture
def config(emulator: DynamixelEmulator, tmp_path: Path) -> HostConfig:
    return load_config(write_config(tmp_path, emulator.path))


@pytest.fixture
def family(config: HostConfig, tmp_path: Path) -> Iterator[Family]:
    fam = robot_move_family(config, tmp_path / "data" / "robot_move", settle_timeout_s=10)
    try:
        yield fam
    finally:
        assert isinstance(fam.adapter, RobotMoveAdapter)
        fam.adapter.close()
