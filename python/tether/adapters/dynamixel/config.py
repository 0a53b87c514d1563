"""The DYNAMIXEL device type: its port and joint keys, robot configuration in ticks, and the
calls the generic host (`tether.devices.host`) makes.

The generic part of the host configuration (host, operators, ports by identity, robots, joints
with SI limits, safe_stop) is read by `tether.devices.config`; this module adds and validates
the DYNAMIXEL keys and converts the SI values to the servo's units once, through `tables`:

```toml
[ports.arm_bus]
type = "dynamixel"
usb_serial = "FT6Z5XYZ"              # preferred: USB serial number / VID:PID
url = "/dev/ttyUSB0"                 # or a path / pyserial URL (emulator: the pty path)
baudrate = 57600
timeout_ms = 50                      # per status read, milliseconds
read_retries = 2                     # reads only: a write is never resent

[robots.arm]
port = "arm_bus"

[[robots.arm.joints]]
name = "shoulder"
id = 1                               # 0..252
min = -1.5                           # radians, within the servo's one turn
max = 1.5
model = 1030                         # optional: expected PING model number
```
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether._config import HostConfigError, Table, clipped, nearest
from tether.adapters.dynamixel import tables
from tether.devices import config as generic
from tether.devices.config import DEFAULT_TOLERANCE, SAFE_STOP_POLICIES, RobotSpec, did_you_mean
from tether.devices.credentials import hash_secret

#: The keys each DYNAMIXEL table adds to the generic ones (anything else is `unknown_key`).
PORT_EXTRA_KEYS = ("baudrate", "timeout_ms", "read_retries")
#: The baud rates DYNAMIXEL servos are set to (their Baud Rate control table item, X and P
#: series): a port's `baudrate` is one of them.
BAUDRATES = (9600, 57600, 115200, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 4_500_000, 10_500_000)
JOINT_EXTRA_KEYS = ("model",)
PORT_KEYS = (*generic.PORT_KEYS, *PORT_EXTRA_KEYS)
ROBOT_KEYS = generic.ROBOT_KEYS
JOINT_KEYS = (*generic.JOINT_KEYS, *JOINT_EXTRA_KEYS)
TOP_KEYS = generic.TOP_KEYS
HOST_KEYS = generic.HOST_KEYS
OPERATOR_KEYS = generic.OPERATOR_KEYS

#: Every `.code` a HostConfigError can carry (this module's and the generic reader's).
ERROR_CODES: tuple[str, ...] = tuple(
    sorted({*generic.ERROR_CODES, "bad_id", "bad_limit", "limit_violation", "out_of_range"})
)

__all__ = [
    "DEFAULT_TOLERANCE",
    "DEVICE_TYPE",
    "ERROR_CODES",
    "SAFE_STOP_POLICIES",
    "DynamixelPortConfig",
    "HostConfig",
    "JointConfig",
    "RobotConfig",
    "config_error",
    "hash_credential",
    "load_config",
    "parse_config",
]


def config_error(code: str, message: str, **details: Any) -> HostConfigError:
    """A HostConfigError carrying a stable snake_case `.code` (one of `ERROR_CODES`)."""
    return generic.listed_config_error(ERROR_CODES, code, message, **details)


@dataclass(frozen=True)
class DynamixelPortConfig:
    """One DYNAMIXEL bus: how to find the adapter and how to talk on it."""

    name: str
    url: str | None
    usb_serial: str | None
    vid_pid: str | None
    baudrate: int = 57600
    timeout_ms: int = 50
    read_retries: int = 2

    KEYS = PORT_KEYS
    type = "dynamixel"


@dataclass(frozen=True)
class JointConfig:
    name: str
    id: int
    min_rad: float
    max_rad: float
    min_ticks: int
    max_ticks: int
    model: int | None = None

    def check_ticks(self, ticks: int) -> None:
        """Refuse a goal outside the configured limits (before anything is sent)."""
        if not self.min_ticks <= ticks <= self.max_ticks:
            raise config_error(
                "limit_violation",
                f"joint {self.name} (id {self.id}): goal "
                f"{tables.ticks_to_radians(ticks):+.4f} rad outside "
                f"[{self.min_rad:+.4f}, {self.max_rad:+.4f}] rad",
            )


@dataclass(frozen=True)
class RobotConfig:
    name: str
    port: str
    joints: tuple[JointConfig, ...]
    safe_stop: str
    velocity: int
    first_motion_velocity: int
    tolerance_ticks: int
    tolerance_rad: float = DEFAULT_TOLERANCE

    def joint_by_id(self, dxl_id: int) -> JointConfig:
        for joint in self.joints:
            if joint.id == dxl_id:
                return joint
        raise config_error(
            "unknown_joint", f"robot {self.name} has no joint with id {dxl_id}", id=dxl_id
        )

    def joint(self, name: str) -> JointConfig:
        for joint in self.joints:
            if joint.name == name:
                return joint
        names = [j.name for j in self.joints]
        raise config_error(
            "unknown_joint",
            f"robot {self.name} has no joint {clipped(name)!r}{did_you_mean(name, names)}",
            joint=clipped(name),
            suggestion=nearest(name, names),
        )

    @property
    def ids(self) -> list[int]:
        return [j.id for j in self.joints]


class HostConfig(generic.HostConfig[RobotConfig]):
    """A host configuration whose robots are DYNAMIXEL robots."""


class DynamixelDeviceType:
    """The `dynamixel` entry of `tether.devices.registry.DEVICE_TYPES`."""

    name = "dynamixel"
    port_keys = PORT_EXTRA_KEYS
    joint_keys = JOINT_EXTRA_KEYS

    def port_config(
        self, name: str, table: Table, url: str | None, usb_serial: str | None, vid_pid: str | None
    ) -> DynamixelPortConfig:
        baudrate = table.integer("baudrate", 57600)
        timeout_ms = table.integer("timeout_ms", 50)
        read_retries = table.integer("read_retries", 2)
        if baudrate not in BAUDRATES:
            # A rate no DYNAMIXEL runs at (a typo: 5760) would only show as timeouts.
            raise config_error(
                "out_of_range",
                f"{table.where}: baudrate {baudrate} is not a DYNAMIXEL rate"
                f" ({', '.join(map(str, BAUDRATES))})",
            )
        if not 1 <= timeout_ms <= 10_000:
            raise config_error(
                "out_of_range", f"{table.where}: timeout_ms {timeout_ms} is not 1..10000"
            )
        if not 0 <= read_retries <= 10:
            raise config_error(
                "out_of_range", f"{table.where}: read_retries {read_retries} is not 0..10"
            )
        return DynamixelPortConfig(
            name, url, usb_serial, vid_pid, baudrate, timeout_ms, read_retries
        )

    def robot_config(self, spec: RobotSpec, joint_tables: list[Table]) -> RobotConfig:
        slowest = tables.SLOWEST_PROFILE_RAD_S
        for key, value in (("speed", spec.speed), ("first_motion_speed", spec.first_motion_speed)):
            if value < slowest:
                # Profile Velocity counts 0.229 rpm units: a slower limit would be sent as one
                # unit, faster than the configuration says.
                raise config_error(
                    "bad_speed",
                    f"robots.{spec.name}: {key} {value:g} rad/s is slower than a DYNAMIXEL can"
                    f" be limited to ({slowest:.4f} rad/s, one Profile Velocity unit of"
                    f" {tables.VELOCITY_UNIT_RPM} rpm): give at least {slowest:.4f}",
                )
        joints = []
        for joint, table in zip(spec.joints, joint_tables, strict=True):
            where = table.where
            if not 0 <= joint.id <= 252:
                raise config_error("bad_id", f"{where}: id {joint.id} is not 0..252")
            try:
                lo_t, hi_t = tables.limit_ticks(joint.min_rad, joint.max_rad)
            except ValueError as exc:
                raise config_error("bad_limit", f"{where}: {exc}") from exc
            if lo_t < 0 or hi_t > tables.MAX_TICK:
                low, high = tables.ticks_to_radians(0), tables.ticks_to_radians(tables.MAX_TICK)
                wide = lo_t < -tables.MAX_TICK or hi_t > 2 * tables.MAX_TICK  # a turn past
                degrees = " (min and max are radians, not degrees)" if wide else ""
                raise config_error(
                    "bad_limit",
                    f"{where}: min {joint.min_rad:g}, max {joint.max_rad:g} rad leave the"
                    f" one-turn range of the servo, {low:.4f}..{high:.4f} rad{degrees}",
                )
            if lo_t > hi_t:
                # No tick lies within them: a goal there was sent as a tick outside.
                step = tables.ticks_to_radians(1) - tables.ticks_to_radians(0)
                raise config_error(
                    "bad_limit",
                    f"{where}: min {joint.min_rad:g} and max {joint.max_rad:g} rad hold no"
                    f" position the servo can take (one tick is {step:.6f} rad): widen them",
                )
            model = table.optional_integer("model")
            joints.append(
                JointConfig(joint.name, joint.id, joint.min_rad, joint.max_rad, lo_t, hi_t, model)
            )
        return RobotConfig(
            spec.name,
            spec.port,
            tuple(joints),
            spec.safe_stop,
            tables.profile_velocity_for(spec.speed),
            tables.profile_velocity_for(spec.first_motion_speed),
            abs(tables.radians_to_tick_delta(spec.tolerance)),
            spec.tolerance,
        )

    def open_bus(
        self, port: DynamixelPortConfig, *, lock_dir: Path | None, socket_path: str | None
    ) -> Any:
        from tether.adapters.dynamixel.driver import DxlBus

        return DxlBus.open_config(port, lock_dir=lock_dir, socket_path=socket_path)

    def set_gate(self, bus: Any, gate: Any) -> None:
        bus.gate = gate

    def connect(self, bus: Any, robot: RobotConfig, *, for_stop: bool = False) -> Any:
        from tether.adapters.dynamixel.driver import check_robot

        return check_robot(bus, robot, retries=0 if for_stop else None)

    def lost(self, bus: Any) -> bool:
        return bool(bus.lost)

    def read_state(self, bus: Any, robot: RobotConfig) -> dict[str, Any]:
        from tether.adapters.dynamixel.host import read_state

        return read_state(bus, robot)

    def si_state(self, robot: RobotConfig, state: dict[str, Any]) -> dict[str, Any]:
        """A raw read-back in SI units, by joint name (the one conversion: `move.si_read_back`)."""
        from tether.adapters.dynamixel.move import si_read_back

        return si_read_back(robot, state)

    def safe_stop(self, bus: Any, robot: RobotConfig) -> Any:
        from tether.adapters.dynamixel.safety import safe_stop

        return safe_stop(bus, robot)

    def stopped_report(self, bus: Any, robot: RobotConfig) -> Any:
        """What each joint is, read back only (no frame that changes anything is sent)."""
        from tether.adapters.dynamixel.safety import (
            JointStop,
            ReadBack,
            SafeStopReport,
            stopped_state,
        )

        report = SafeStopReport(robot.name, robot.safe_stop)
        for joint in robot.joints:
            try:
                back = ReadBack(
                    bus.read_field(joint.id, tables.TORQUE_ENABLE),
                    bus.read_field(joint.id, tables.HARDWARE_ERROR_STATUS),
                    bus.read_field(joint.id, tables.PRESENT_POSITION),
                    bus.read_field(joint.id, tables.GOAL_POSITION),
                )
            except Exception as exc:
                failed = f"read-back failed: {type(exc).__name__}: {exc}"
                report.joints.append(JointStop(joint.name, joint.id, "unknown", error=failed))
                continue
            state = stopped_state(back, hold_confirmed=False, tolerance_ticks=robot.tolerance_ticks)
            bits = back.hardware_error_status
            report.joints.append(
                JointStop(
                    joint.name,
                    joint.id,
                    state,
                    torque=back.torque_enable == 1,
                    hardware_error=tables.hardware_errors(bits)
                    or ([f"0x{bits:02x}"] if bits else []),
                    present=round(tables.ticks_to_radians(back.present_position), 4),
                    goal=round(tables.ticks_to_radians(back.goal_position), 4),
                )
            )
        return report

    def stop_failure(self, robot: RobotConfig, error: str) -> Any:
        from tether.adapters.dynamixel.safety import SafeStopReport

        return SafeStopReport(robot.name, robot.safe_stop, error=error)

    def reboot(self, bus: Any, robot: RobotConfig, joint_ids: list[int], *, operator: str) -> None:
        for dxl_id in joint_ids:
            bus.reboot(dxl_id, operator=operator)


DEVICE_TYPE = DynamixelDeviceType()


def parse_config(text: str, path: Path = Path("<memory>")) -> HostConfig:
    """Validate a TOML host configuration (generic part and the DYNAMIXEL keys)."""
    return generic.parse_config(text, path, factory=HostConfig)


def load_config(path: str | os.PathLike[str]) -> HostConfig:
    return generic.load_config(path, factory=HostConfig)


def hash_credential(secret: str) -> str:
    """An argon2id hash of `secret` (see `tether.devices.credentials`)."""
    return hash_secret(secret)
