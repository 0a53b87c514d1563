"""Safe-stop and the speed limit of a first motion.

Safe-stop, per robot policy from the host configuration:
- `hold`: torque stays on and every joint's Goal Position is set to its Present Position, so
  the arm stops where it is and keeps holding its load.
- `torque_off`: Torque Enable is cleared on every joint (the arm goes limp).
A REG_WRITE that is still staged is left staged: its Registered Instruction flag is evidence
that reconciliation reads, and only Tether sends ACTION, after neutralising it. Every joint is
tried even when another fails; failures are reported, never swallowed.

First motion: after a (re)connect or an operator re-issue the first move runs at the robot's
`first_motion_velocity` (Profile Velocity), measured against a fresh read of Present Position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import RobotConfig
from tether.adapters.dynamixel.driver import DxlBus
from tether.errors import TetherError


@dataclass
class SafeStopReport:
    robot: str
    policy: str
    joints: dict[int, str] = field(default_factory=dict)  # id -> "held" / "torque_off" / error
    ok: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"robot": self.robot, "policy": self.policy, "ok": self.ok, "joints": self.joints}


def safe_stop(bus: DxlBus, robot: RobotConfig) -> SafeStopReport:
    """Apply the robot's safe-stop policy to every joint; never raises for one joint's failure."""
    report = SafeStopReport(robot.name, robot.safe_stop)
    for joint in robot.joints:
        try:
            if robot.safe_stop == "torque_off":
                bus.write_field(joint.id, tables.TORQUE_ENABLE, 0)
                report.joints[joint.id] = "torque_off"
            else:
                present = bus.read_field(joint.id, tables.PRESENT_POSITION)
                held = min(max(present, joint.min_ticks), joint.max_ticks)
                bus.write_field(joint.id, tables.GOAL_POSITION, held)
                report.joints[joint.id] = "held"
        except (TetherError, OSError) as exc:
            report.joints[joint.id] = f"failed: {exc}"
            report.ok = False
    return report


def limit_first_motion(
    bus: DxlBus, robot: RobotConfig, ids: list[int], *, first: bool
) -> dict[int, int]:
    """Set Profile Velocity for the coming move (slow when `first`); returns present positions.

    Present Position is read fresh here so the caller measures the first motion from where the
    arm really is, not from where it was last commanded.
    """
    velocity = robot.first_motion_velocity if first else robot.velocity
    present = bus.sync_read_field(tables.PRESENT_POSITION, ids)
    for dxl_id in ids:
        bus.write_field(dxl_id, tables.PROFILE_VELOCITY, velocity)
    return present
