"""The DYNAMIXEL side of the generic device host (`tether.devices.host`).

`RobotHost` is the generic `DeviceHost` with the DYNAMIXEL bus type; `read_state` is the
device type's read-back (raw registers, ticks: evidence converts them to SI). The control
channel, port ownership, the stop latch and safe-stop on exit are generic and re-exported
here for the adapter's callers.
"""

from __future__ import annotations

import time
from typing import Any

from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig, RobotConfig
from tether.adapters.dynamixel.driver import DxlBus
from tether.devices.control import ControlServer, send_request, socket_path_for
from tether.devices.host import (
    DeviceHost,
    fresh_state,
    last_operator_stop,
    owner_socket,
    stop_everything,
)
from tether.devices.latch import MotionStopped, StopLatch

__all__ = [
    "ControlServer",
    "MotionStopped",
    "RobotHost",
    "fresh_state",
    "last_operator_stop",
    "owner_socket",
    "read_state",
    "record_operator_stop",
    "send_request",
    "socket_path_for",
    "stop_everything",
]


def read_state(bus: DxlBus, robot: RobotConfig) -> dict[str, Any]:
    """A fresh read-back of every joint, with the wall time it was taken."""
    ids = robot.ids
    fields = (
        tables.PRESENT_POSITION,
        tables.GOAL_POSITION,
        tables.MOVING,
        tables.TORQUE_ENABLE,
        tables.REGISTERED_INSTRUCTION,
        tables.HARDWARE_ERROR_STATUS,
    )
    joints: dict[str, dict[str, int]] = {str(i): {} for i in ids}
    for f in fields:
        for dxl_id, value in bus.sync_read_field(f, ids).items():
            joints[str(dxl_id)][f.name] = value
    return {"robot": robot.name, "read_at_ms": int(time.time() * 1000), "joints": joints}


def record_operator_stop(config: HostConfig, robot_name: str) -> None:
    """Latch `robot_name` as an operator's stop would (durably; `tether operator resume`)."""
    StopLatch(config.state_dir).latch(robot_name)


class RobotHost(DeviceHost):
    """The generic device host over DYNAMIXEL buses. Single owner; close() always safe-stops."""

    config: HostConfig

    def __init__(self, config: HostConfig) -> None:
        super().__init__(config)

    def bus_for(self, robot: RobotConfig) -> DxlBus:
        bus: DxlBus = super().bus_for(robot)
        return bus

    def __enter__(self) -> RobotHost:
        return self
