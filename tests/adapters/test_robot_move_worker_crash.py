"""Crash tests through the runtime: a `tether worker` process running the robot_move family is
SIGKILLed at the adapter's named points; a fresh worker process takes over after the lease
lapses. The journal shows one target ACTION per joint and the activity reaches its result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from _dxl_setup import GOALS, TARGETS, target_actions, write_config
from tether.activities import ActivityKey
from tether.adapters.dynamixel.config import load_config
from tether.emulators.dynamixel import DynamixelEmulator
from tether.physical.robot_move import KIND_ABSOLUTE, MoveRequest
from tether.physical.robot_move_family import CONFIG_ENV, OBSERVATION, intent, robot_move_family
from tether.physical.robot_move_store import MoveStore
from tether.runtime import Host

KEY = ActivityKey("w", KIND_ABSOLUTE, "move-1")


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator([1, 2], speed_scale=20.0) as emu:
        yield emu


def worker(data: Path, config: Path, crash_at: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_DXL_CRASH_AT"}
    env[CONFIG_ENV] = str(config)
    if crash_at:
        env["TETHER_DXL_CRASH_AT"] = crash_at
    argv = [
        "worker",
        str(data),
        "--families",
        "tether.physical.robot_move_family:families_from_env",
        "--lease-ms",
        "1500",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "tether", *argv], env=env, stderr=subprocess.DEVNULL
    )


def wait_for(check: object, seconds: float = 60.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("crash_at", "attempts"),
    [("after_reg_write", [1, 2]), ("after_action", [1]), ("after_readback", [1])],
)
def test_worker_killed_mid_move_is_finished_by_the_next_worker(
    emulator: DynamixelEmulator, tmp_path: Path, crash_at: str, attempts: list[int]
) -> None:
    config_path = write_config(tmp_path, emulator.path)
    data = tmp_path / "data"
    family = robot_move_family(load_config(config_path), data / "robot_move")
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})
    with Host(data, [family], workers=0, observe=False) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("move-1", request)])
        with worker(data, config_path, crash_at) as first:
            assert first.wait(timeout=60) == -signal.SIGKILL
        with worker(data, config_path, None) as second:
            try:
                wait_for(lambda: (r := host.get(KEY)) is not None and r.result is not None)
            finally:
                second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=60) == 0
        host.observe_once()
        observed = host.snapshot("w").get("move-1", OBSERVATION)
        assert isinstance(observed, dict) and not observed["failed"]
        record = host.get(KEY)
        assert record is not None and record.settlement is not None
    assert target_actions([asdict(e) for e in emulator.journal], GOALS) == {1: 1, 2: 1}
    op = MoveStore(data / "robot_move").get(record.operation_id or "")
    assert op is not None and op.attempts() == attempts
