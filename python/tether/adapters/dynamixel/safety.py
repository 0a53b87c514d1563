"""Safe-stop.

Safe-stop, per robot policy from the host configuration:
- `hold`: torque is left as it is and every joint's Goal Position is set to the Present
  Position just read, so the arm stops where it stands, even outside the configured limits
  (those limits refuse moves before they are sent; a stop never moves the arm to obey them).
- `torque_off`: Torque Enable is cleared on every joint (the arm goes limp).
A caller that journals its commands passes `log`: it is called with each stop write (what,
joint, id, goal, frame digest) before the write is sent, and a failure to log never blocks the
stop (the read-back then shows a change the log does not explain, which reconciliation treats
as unexplained). A REG_WRITE that is still staged is left staged: its Registered Instruction
flag is evidence that reconciliation reads, and only Tether sends ACTION, after neutralising
it. Every joint is tried even when another fails; failures are reported, never swallowed.

Exchanges (the stop goes first on the bus, `DxlBus.priority`: no other thread's exchange
starts until it is done): `hold` reads every joint's Present Position in one SYNC_READ, then
writes each joint's goal (one WRITE each, in joint order); then one SYNC_READ of the block from
Torque Enable to Present Position reads every joint back (four exchanges for two joints). Each
SYNC_READ is sent once and what answered it is used: the joints that answered are held first,
then each joint that did not is read on its own (once each, then with the port's read
retries), so one silent joint's failure stays its own and delays the others by one exchange.

After the policy, every joint is read back and reported as what the device is
(`stopped_state`, a pure function of that read-back):
- `held`: torque on, and its goal is where it stands (the hold was confirmed, or Goal
  Position is within the arrival tolerance of Present Position);
- `limp`: torque off (a servo drops it on a hardware error its Shutdown item enables);
- `moving`: torque on, but its goal is elsewhere: the stop did not take;
- `unknown`: the read-back failed (the error says why).
A robot's stop is `ok` when every joint is in its policy's state (`held` for `hold`, `limp` for
`torque_off`). Positions are reported in radians, and a hardware error is named whatever the
state (one the servo does not shut down on, such as an input voltage out of range, leaves it
powered and holding: it is `held`, never called limp with its torque on).

The speed limit of a first motion is not here: the generic host decides it
(`tether.devices.motion`, `DeviceHost.motion_limit`) and the move path converts it to Profile
Velocity (`move.profile_velocity`), writing it through the move's journaled path.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether import _core
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import JointConfig, RobotConfig
from tether.adapters.dynamixel.driver import DxlBus
from tether.errors import TetherError

#: What a joint is after a stop (see the module docstring).
STOPPED_STATES = ("held", "limp", "moving", "unknown")
#: The state each safe-stop policy asks for.
POLICY_STATE = {"hold": "held", "torque_off": "limp"}


@dataclass(frozen=True)
class ReadBack:
    """The registers a stop reads back from one joint (raw, as the device holds them)."""

    torque_enable: int
    hardware_error_status: int
    present_position: int
    goal_position: int


def stopped_state(read_back: ReadBack | None, *, hold_confirmed: bool, tolerance_ticks: int) -> str:
    """What a joint is after a stop, decided from its read-back alone (None: unreadable)."""
    if read_back is None:
        return "unknown"
    if read_back.torque_enable != 1:
        return "limp"
    at_goal = abs(read_back.goal_position - read_back.present_position) <= tolerance_ticks
    return "held" if hold_confirmed or at_goal else "moving"


@dataclass
class JointStop:
    """One joint after a stop: its state and the read-back behind it, in SI units."""

    joint: str
    id: int
    state: str
    torque: bool | None = None
    hardware_error: list[str] = field(default_factory=list)
    present: float | None = None  # radians
    goal: float | None = None  # radians
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "joint": self.joint,
            "id": self.id,
            "state": self.state,
            "torque": self.torque,
            "hardware_error": self.hardware_error,
            "present_rad": self.present,
            "goal_rad": self.goal,
            "error": self.error,
        }


@dataclass
class SafeStopReport:
    robot: str
    policy: str
    joints: list[JointStop] = field(default_factory=list)
    error: str | None = None  # the whole robot could not be reached

    @property
    def ok(self) -> bool:
        wanted = POLICY_STATE.get(self.policy)
        return self.error is None and all(j.state == wanted for j in self.joints)

    def as_dict(self) -> dict[str, Any]:
        return {
            "robot": self.robot,
            "policy": self.policy,
            "ok": self.ok,
            "error": self.error,
            "joints": [j.as_dict() for j in self.joints],
        }


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


#: The registers a stop reads back, as one contiguous block of the control table (Torque
#: Enable to Present Position): one READ per joint, or one SYNC_READ for all.
_READ_BACK_FIELDS = (
    tables.TORQUE_ENABLE,
    tables.HARDWARE_ERROR_STATUS,
    tables.PRESENT_POSITION,
    tables.GOAL_POSITION,
)
_BLOCK_START = min(f.address for f in _READ_BACK_FIELDS)
_BLOCK_LENGTH = max(f.end for f in _READ_BACK_FIELDS) - _BLOCK_START


def _decode_read_back(block: bytes) -> ReadBack:
    def field(f: tables.Field) -> int:
        at = f.address - _BLOCK_START
        return tables.decode(f, block[at : at + f.size])

    return ReadBack(*(field(f) for f in _READ_BACK_FIELDS))


def _read_back(bus: DxlBus, dxl_id: int) -> ReadBack:
    return _decode_read_back(bus.read(dxl_id, _BLOCK_START, _BLOCK_LENGTH))


StopLog = Callable[[dict[str, Any]], None]


def _digest(frame: bytes) -> str:
    return "sha256:" + hashlib.sha256(frame).hexdigest()


def _log_stop(log: StopLog | None, entry: dict[str, Any]) -> None:
    if log is None:
        return
    try:
        log(entry)
    except Exception:  # a stop is never blocked by its journal (see the module docstring)
        pass


def safe_stop(bus: DxlBus, robot: RobotConfig, *, log: StopLog | None = None) -> SafeStopReport:
    """Apply the robot's safe-stop policy to every joint, then report what each joint is, read
    back from the device; never raises for one joint's failure."""
    with bus.priority():  # no other thread's exchange starts until the stop is done
        return _safe_stop(bus, robot, log)


def _torque_off(bus: DxlBus, joint: JointConfig, log: StopLog | None) -> tuple[list[str], bool]:
    """Torque off on ``joint``: its errors (none when the write was confirmed), and False
    (no hold to confirm)."""
    entry = {
        "instruction": "stop_torque_off",
        "joint": joint.name,
        "id": joint.id,
        "digest": _digest(
            _core.dxl_write(
                joint.id, tables.TORQUE_ENABLE.address, tables.encode(tables.TORQUE_ENABLE, 0)
            )
        ),
    }
    _log_stop(log, entry)
    try:
        bus.write_field(joint.id, tables.TORQUE_ENABLE, 0)
    except (TetherError, OSError) as exc:
        return [f"torque_off failed: {_failure(exc)}"], False
    return [], False


def _hold(
    bus: DxlBus, joint: JointConfig, present: int, log: StopLog | None
) -> tuple[list[str], bool]:
    """``joint`` held at ``present`` (its goal written as it is, never clamped to the
    configured limits: an arm outside them stays where it is): its errors, and whether the
    hold's write was confirmed."""
    goal_rad = tables.ticks_to_radians(present)
    entry = {
        "instruction": "stop_hold",
        "joint": joint.name,
        "id": joint.id,
        "goal_rad": round(goal_rad, 6) if math.isfinite(goal_rad) else None,
        "digest": _digest(
            _core.dxl_write(
                joint.id, tables.GOAL_POSITION.address, tables.encode(tables.GOAL_POSITION, present)
            )
        ),
    }
    _log_stop(log, entry)
    try:
        bus.write_field(joint.id, tables.GOAL_POSITION, present)
    except (TetherError, OSError) as exc:
        return [f"hold failed: {_failure(exc)}"], False
    return [], True


def _answered(ids: list[int], read: Callable[[list[int]], dict[int, Any]]) -> dict[int, Any]:
    """`read` of every joint in one SYNC_READ exchange, sent once, when there are several:
    the joints that answered it (each other joint is then read on its own); {} when the
    exchange itself fails."""
    if len(ids) < 2:
        return {}
    try:
        return read(ids)
    except (TetherError, OSError):
        return {}


def _safe_stop(bus: DxlBus, robot: RobotConfig, log: StopLog | None) -> SafeStopReport:
    report = SafeStopReport(robot.name, robot.safe_stop)
    ids = [joint.id for joint in robot.joints]
    outcomes: dict[int, tuple[list[str], bool]] = {}
    if robot.safe_stop == "torque_off":
        for joint in robot.joints:
            outcomes[joint.id] = _torque_off(bus, joint, log)
    else:
        # Every present position in one exchange, sent once, then each joint that answered
        # held, one write after the other: four exchanges for two joints. A joint the
        # exchange missed is read on its own once the others are held, each such joint tried
        # once before any is retried, so a servo that answers nothing delays the others'
        # holds by one exchange, never by its port's timeout times its read retries.
        presents: dict[int, int] = _answered(
            ids,
            lambda ids: {
                i: tables.decode(tables.PRESENT_POSITION, d)
                for i, d in bus.sync_read_answered(
                    tables.PRESENT_POSITION.address, tables.PRESENT_POSITION.size, ids
                ).items()
            },
        )
        unread = []
        for joint in robot.joints:
            if joint.id in presents:
                outcomes[joint.id] = _hold(bus, joint, presents[joint.id], log)
            else:
                unread.append(joint)
        # Each pass's retries: one try each first, then what is left of the port's budget.
        passes = [0] if bus.read_retries < 1 else [0, bus.read_retries - 1]
        for number, retries in enumerate(passes):
            last = number == len(passes) - 1
            again = []
            for joint in unread:
                try:
                    present = bus.read_field(joint.id, tables.PRESENT_POSITION, retries=retries)
                except (TetherError, OSError) as exc:
                    if last:
                        outcomes[joint.id] = ([f"hold failed: {_failure(exc)}"], False)
                    else:
                        again.append(joint)
                    continue
                outcomes[joint.id] = _hold(bus, joint, present, log)
            unread = again
    blocks: dict[int, bytes] = _answered(
        ids, lambda ids: bus.sync_read_answered(_BLOCK_START, _BLOCK_LENGTH, ids)
    )
    for joint in robot.joints:
        errors, hold_confirmed = outcomes[joint.id]
        read_back: ReadBack | None = None
        try:
            block = blocks.get(joint.id)
            read_back = _read_back(bus, joint.id) if block is None else _decode_read_back(block)
        except (TetherError, OSError) as exc:
            errors.append(f"read-back failed: {_failure(exc)}")
        state = stopped_state(
            read_back, hold_confirmed=hold_confirmed, tolerance_ticks=robot.tolerance_ticks
        )
        stop = JointStop(joint.name, joint.id, state, error="; ".join(errors) or None)
        if read_back is not None:
            stop.torque = read_back.torque_enable == 1
            bits = read_back.hardware_error_status
            stop.hardware_error = tables.hardware_errors(bits) or (
                [f"0x{bits:02x}"] if bits else []
            )
            stop.present = round(tables.ticks_to_radians(read_back.present_position), 4)
            stop.goal = round(tables.ticks_to_radians(read_back.goal_position), 4)
        report.joints.append(stop)
    return report
