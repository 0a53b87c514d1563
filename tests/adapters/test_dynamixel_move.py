"""The robot_move adapter in-process against the emulator thread: every fault injection has
its expected outcome; limits and credentials are refused before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import GOALS, TARGETS, settled, target_actions, write_config
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig, load_config
from tether.adapters.dynamixel.worker import run_move
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.errors import HostConfigError, OperatorRejection
from tether.operator.decisions import resolve
from tether.physical.robot_move import KIND_ABSOLUTE, MoveRequest, RetryClass, operation_id
from tether.physical.robot_move_store import MoveStore


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator([1, 2], speed_scale=20.0) as emu:
        yield emu


@pytest.fixture
def config(emulator: DynamixelEmulator, tmp_path: Path) -> HostConfig:
    return load_config(write_config(tmp_path, emulator.path))


@pytest.fixture
def store(tmp_path: Path) -> MoveStore:
    return MoveStore(tmp_path / "store")


def request(targets: dict[str, float] | None = None) -> MoveRequest:
    return MoveRequest.from_dict(
        {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": targets or TARGETS}
    )


def journal(emulator: DynamixelEmulator) -> list[dict[str, Any]]:
    return [asdict(e) for e in emulator.journal]


def test_a_clean_move_publishes_progress_and_lands(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    seen: list[dict[str, Any]] = []
    out = run_move(config, store, "op-1", request(), progress=seen.append)
    assert out == {"status": "done", "conclusion": "executed", "attempt": 1}
    assert seen and seen[-1]["fraction"] == 1.0
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}
    names = [e.instruction for e in emulator.journal]
    assert names.index("action") > max(i for i, n in enumerate(names) if n == "reg_write")
    op = store.get("op-1")
    assert op is not None and op.request.retry_class is RetryClass.ABSOLUTE_IDEMPOTENT
    preimage = op.preimage(1)
    arm = config.robot("arm")
    assert preimage is not None and preimage["profile_velocity"] == arm.first_motion_velocity
    assert emulator.snapshot(1)["profile_velocity"] == arm.first_motion_velocity


def test_limits_are_refused_before_anything_is_sent(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    with pytest.raises(HostConfigError) as info:
        run_move(config, store, "op-x", request({"a": 1.6, "b": 0.0}))
    assert getattr(info.value, "code", None) == "limit_violation"
    assert emulator.journal == [] and store.get("op-x") is None


def test_lost_reg_write_status_is_confirmed_absent_then_runs_once(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.inject(Fault("drop_status", instruction="reg_write", id=2))
    first = run_move(config, store, "op-2", request())
    assert (first["status"], first["conclusion"]) == ("pending", "confirmed_absent")
    assert "WriteUnconfirmed" in first["error"]
    assert target_actions(journal(emulator), GOALS) == {1: 0, 2: 0}
    assert run_move(config, store, "op-2", request())["status"] == "done"
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}


def test_corrupt_and_noisy_read_backs_are_retried(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.inject(Fault("corrupt_crc", count=2, instruction="sync_read"))
    emulator.inject(Fault("noise", count=3, instruction="read"))
    assert run_move(config, store, "op-3", request())["status"] == "done"
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}


def test_alert_mid_move_stops_safely_and_parks(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.speed_scale = 0.5

    def on_progress(content: dict[str, Any]) -> None:
        if not emulator.snapshot(1)["hardware_error_status"]:
            emulator.inject(Fault("alert", id=1, value=0x20))

    out = run_move(config, store, "op-4", request(), progress=on_progress)
    assert (out["status"], out["reason"]) == ("awaiting_decision", "hardware_error")
    assert "MoveNotReached" in out["error"]
    state = settled(lambda: emulator.snapshot(2))
    assert state["goal_position"] == state["present_position"]  # held where it was
    op = store.get("op-4")
    assert op is not None and op.parked
    # Parked: a new run does nothing.
    before = len(emulator.journal)
    assert run_move(config, store, "op-4", request())["status"] == "awaiting_decision"
    assert len(emulator.journal) == before


def test_an_exception_cannot_skip_the_safe_stop(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.speed_scale = 0.5

    def boom(content: dict[str, Any]) -> None:
        raise RuntimeError("planner crashed")

    with pytest.raises(RuntimeError):
        run_move(config, store, "op-5", request(), progress=boom)
    for dxl_id, goal in GOALS.items():
        state = settled(partial(emulator.snapshot, dxl_id))
        assert state["goal_position"] == state["present_position"] != goal


def test_reboot_between_moves_is_reconnected_with_a_slow_first_motion(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    assert run_move(config, store, "op-6", request())["status"] == "done"
    emulator.power_cycle()
    assert emulator.snapshot(1)["torque_enable"] == 0
    assert run_move(config, store, "op-7", request({"a": 0.0, "b": 0.0}))["status"] == "done"
    state = emulator.snapshot(1)
    assert state["torque_enable"] == 1 and state["goal_position"] == tables.CENTER_TICK
    assert state["profile_velocity"] == config.robot("arm").first_motion_velocity


def test_resolve_refuses_a_missing_credential_before_reading_anything(
    config: HostConfig, store: MoveStore
) -> None:
    def must_not_read(robot: str) -> dict[str, Any]:
        raise AssertionError("the device was read without a credential")

    for credential in (None, "", "wrong"):
        with pytest.raises(OperatorRejection) as info:
            resolve(
                config,
                store,
                "op-9",
                decision="done",
                revision=1,
                operator="al",
                credential=credential,
                read_state=must_not_read,
            )
        assert getattr(info.value, "code", None) == "credential_refused"


def test_operation_ids_are_namespaced() -> None:
    a = operation_id(KIND_ABSOLUTE, "w1", "x")
    assert a != operation_id(KIND_ABSOLUTE, "w2", "x")
    assert a != operation_id("physical_ai.robot_move.relative", "w1", "x")


def test_a_stale_staged_write_never_rides_along_with_the_action(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    # An abandoned move left a REG_WRITE staged on joint b; the next move only moves joint a.
    stale = emulator.servos[2]
    stale.staged = (tables.GOAL_POSITION.address, tables.encode(tables.GOAL_POSITION, 3000))
    stale.set(tables.REGISTERED_INSTRUCTION, 1)
    assert run_move(config, store, "op-10", request({"a": 0.2}))["status"] == "done"
    state = emulator.snapshot(2)
    assert state["goal_position"] == tables.CENTER_TICK and state["registered_instruction"] == 0
    assert emulator.snapshot(1)["goal_position"] == tables.radians_to_ticks(0.2)
