"""The device owner refuses commands from an older fence: once an operator's re-issue proof has
raised a move's fence floor, an attempt under it sends nothing (not even its journal line)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _dxl_setup import TARGETS, write_config
from tether.adapters.dynamixel.config import load_config
from tether.adapters.dynamixel.host import RobotHost
from tether.adapters.dynamixel.move import DynamixelMoveAdapter, FencedOut
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest

REQUEST = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator([1, 2], speed_scale=20.0) as emu:
        yield emu


def test_an_attempt_under_the_fence_floor_sends_nothing(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    config = load_config(write_config(tmp_path, emulator.path))
    op = MoveStore(tmp_path / "journal").bind("robot_move-1", REQUEST)
    op.start_attempt(1, {"fence": 3})
    op.raise_fence_floor(5)  # an operator's re-issue proof was taken meanwhile
    with RobotHost(config) as host:
        host.connect("arm")
        stale = DynamixelMoveAdapter(config, host, fence=3)
        with pytest.raises(FencedOut) as info:
            stale.execute(op, 1, REQUEST)
        assert info.value.code == "fenced_out"
        assert op.sent() == []  # nothing logged, so nothing sent
        effectful = [e for e in emulator.journal if e.instruction in ("reg_write", "action")]
        assert effectful == []
        live = DynamixelMoveAdapter(config, host, fence=6)
        result = live.execute(op, 1, REQUEST)
        assert result["outcome"] == "completed"
        assert [s["instruction"] for s in op.sent()][-1] == "action"
