"""X-series control table (Protocol 2.0), units and the one radians <-> ticks conversion.

Addresses, sizes, access and initial values follow the ROBOTIS e-manual's XM430-W210 control
table; other X-series models share the addresses used here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Field:
    """One control-table item."""

    name: str
    address: int
    size: int
    writable: bool
    eeprom: bool
    initial: int = 0
    signed: bool = False

    @property
    def end(self) -> int:
        return self.address + self.size


def _f(
    name: str, address: int, size: int, access: str, initial: int = 0, signed: bool = False
) -> Field:
    return Field(name, address, size, access == "rw", address < 64, initial, signed)


FIELDS: tuple[Field, ...] = (
    _f("model_number", 0, 2, "r", 1030),
    _f("model_information", 2, 4, "r"),
    _f("firmware_version", 6, 1, "r", 45),
    _f("id", 7, 1, "rw", 1),
    _f("baud_rate", 8, 1, "rw", 1),
    _f("return_delay_time", 9, 1, "rw", 250),
    _f("drive_mode", 10, 1, "rw", 0),
    _f("operating_mode", 11, 1, "rw", 3),
    _f("secondary_id", 12, 1, "rw", 255),
    _f("protocol_type", 13, 1, "rw", 2),
    _f("homing_offset", 20, 4, "rw", 0, signed=True),
    _f("moving_threshold", 24, 4, "rw", 10),
    _f("temperature_limit", 31, 1, "rw", 80),
    _f("max_voltage_limit", 32, 2, "rw", 160),
    _f("min_voltage_limit", 34, 2, "rw", 95),
    _f("pwm_limit", 36, 2, "rw", 885),
    _f("current_limit", 38, 2, "rw", 1193),
    _f("velocity_limit", 44, 4, "rw", 330),
    _f("max_position_limit", 48, 4, "rw", 4095),
    _f("min_position_limit", 52, 4, "rw", 0),
    _f("startup_configuration", 60, 1, "rw", 0),
    _f("shutdown", 63, 1, "rw", 52),
    _f("torque_enable", 64, 1, "rw", 0),
    _f("led", 65, 1, "rw", 0),
    _f("status_return_level", 68, 1, "rw", 2),
    _f("registered_instruction", 69, 1, "r", 0),
    _f("hardware_error_status", 70, 1, "r", 0),
    _f("velocity_i_gain", 76, 2, "rw", 1920),
    _f("velocity_p_gain", 78, 2, "rw", 100),
    _f("position_d_gain", 80, 2, "rw", 0),
    _f("position_i_gain", 82, 2, "rw", 0),
    _f("position_p_gain", 84, 2, "rw", 800),
    _f("feedforward_2nd_gain", 88, 2, "rw", 0),
    _f("feedforward_1st_gain", 90, 2, "rw", 0),
    _f("bus_watchdog", 98, 1, "rw", 0),
    _f("goal_pwm", 100, 2, "rw", 885, signed=True),
    _f("goal_current", 102, 2, "rw", 1193, signed=True),
    _f("goal_velocity", 104, 4, "rw", 0, signed=True),
    _f("profile_acceleration", 108, 4, "rw", 0),
    _f("profile_velocity", 112, 4, "rw", 0),
    _f("goal_position", 116, 4, "rw", 2048, signed=True),
    _f("realtime_tick", 120, 2, "r", 0),
    _f("moving", 122, 1, "r", 0),
    _f("moving_status", 123, 1, "r", 0),
    _f("present_pwm", 124, 2, "r", 0, signed=True),
    _f("present_current", 126, 2, "r", 0, signed=True),
    _f("present_velocity", 128, 4, "r", 0, signed=True),
    _f("present_position", 132, 4, "r", 2048, signed=True),
    _f("velocity_trajectory", 136, 4, "r", 0, signed=True),
    _f("position_trajectory", 140, 4, "r", 0, signed=True),
    _f("present_input_voltage", 144, 2, "r", 120),
    _f("present_temperature", 146, 1, "r", 30),
    _f("backup_ready", 147, 1, "r", 0),
)

BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}

MODEL_NUMBER = BY_NAME["model_number"]
DRIVE_MODE = BY_NAME["drive_mode"]
OPERATING_MODE = BY_NAME["operating_mode"]
FIRMWARE_VERSION = BY_NAME["firmware_version"]
MIN_POSITION_LIMIT = BY_NAME["min_position_limit"]
MAX_POSITION_LIMIT = BY_NAME["max_position_limit"]
TORQUE_ENABLE = BY_NAME["torque_enable"]
STATUS_RETURN_LEVEL = BY_NAME["status_return_level"]
REGISTERED_INSTRUCTION = BY_NAME["registered_instruction"]
HARDWARE_ERROR_STATUS = BY_NAME["hardware_error_status"]
PROFILE_VELOCITY = BY_NAME["profile_velocity"]
GOAL_POSITION = BY_NAME["goal_position"]
MOVING = BY_NAME["moving"]
PRESENT_POSITION = BY_NAME["present_position"]
VELOCITY_LIMIT = BY_NAME["velocity_limit"]
MOVING_THRESHOLD = BY_NAME["moving_threshold"]

#: Size of the emulated table (covers the RAM area used here; indirect data is not emulated).
TABLE_SIZE = 148

#: Position control: one revolution is 4096 ticks; 0 rad is the centre tick 2048.
TICKS_PER_REV = 4096
CENTER_TICK = 2048
MAX_TICK = 4095
#: Profile Velocity / Velocity Limit unit.
VELOCITY_UNIT_RPM = 0.229


#: Operating Mode (11) values (e-Manual, X-series). Tether drives Position Control only: a goal
#: is one turn's position, within the servo's Min/Max Position Limit.
OPERATING_MODES: dict[int, str] = {
    0: "current control",
    1: "velocity control",
    3: "position control",
    4: "extended position control",
    5: "current-based position control",
    16: "PWM control",
}
POSITION_CONTROL = 3
#: Drive Mode (10) bits a move cannot run under, and why.
DRIVE_MODE_REFUSED: dict[int, str] = {
    0x04: "a time-based profile (bit 2): Profile Velocity would be the move's duration in ms,"
    " not its speed",
    0x08: "torque on by goal update (bit 3): a goal written to a limp servo would power it",
}


class StatusReturnLevel(Enum):
    """Status Return Level (68): which instructions get a status packet."""

    PING_ONLY = 0
    PING_READ = 1
    ALL = 2


HARDWARE_ERROR_BITS: dict[int, str] = {
    0: "input_voltage",
    2: "overheating",
    3: "motor_encoder",
    4: "electrical_shock",
    5: "overload",
}


def hardware_errors(value: int) -> list[str]:
    """Names of the bits set in Hardware Error Status (70)."""
    return [name for bit, name in HARDWARE_ERROR_BITS.items() if value & (1 << bit)]


def radians_to_tick_delta(radians: float) -> int:
    """The one place an angle in radians becomes a number of raw position ticks."""
    if not math.isfinite(radians):
        raise ValueError(f"position {radians!r} is not a finite number of radians")
    return round(radians * TICKS_PER_REV / (2 * math.pi))


def limit_ticks(min_rad: float, max_rad: float) -> tuple[int, int]:
    """The lowest and the highest tick whose position lies within [min_rad, max_rad]: a limit
    between two ticks is the tick inside it, never the nearest one (which may be past it)."""
    scale = TICKS_PER_REV / (2 * math.pi)
    for value in (min_rad, max_rad):
        if not math.isfinite(value):
            raise ValueError(f"position {value!r} is not a finite number of radians")
    # A limit that is a tick (to float noise) is that tick.
    low, high = min_rad * scale, max_rad * scale
    return CENTER_TICK + math.ceil(low - 1e-9), CENTER_TICK + math.floor(high + 1e-9)


def radians_to_ticks(radians: float) -> int:
    """An absolute position in radians as raw ticks (0 rad = tick 2048)."""
    return CENTER_TICK + radians_to_tick_delta(radians)


def ticks_to_radians(ticks: int) -> float:
    return (ticks - CENTER_TICK) * 2 * math.pi / TICKS_PER_REV


def ticks_per_second(profile_velocity: int) -> float:
    """Speed in ticks/s of a Profile Velocity / Velocity Limit raw value."""
    return profile_velocity * VELOCITY_UNIT_RPM / 60.0 * TICKS_PER_REV


#: The slowest speed a Profile Velocity can hold (one unit, rad/s): a slower limit cannot be
#: kept (0 is no limit at all), so the configuration refuses one (`bad_speed`).
SLOWEST_PROFILE_RAD_S = VELOCITY_UNIT_RPM * 2 * math.pi / 60.0


def profile_velocity_for(radians_per_second: float) -> int:
    """Largest raw Profile Velocity (>= 1) not faster than `radians_per_second` (one at or
    above `SLOWEST_PROFILE_RAD_S`, as the configuration checks)."""
    rpm = radians_per_second * 60.0 / (2 * math.pi)
    return max(1, math.floor(rpm / VELOCITY_UNIT_RPM))


def encode(field: Field, value: int) -> bytes:
    return value.to_bytes(field.size, "little", signed=field.signed)


def decode(field: Field, data: bytes) -> int:
    return int.from_bytes(data[: field.size], "little", signed=field.signed)
