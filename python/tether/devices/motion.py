"""The first-motion speed limit, for every device type: the one place that decides it.

After a (re)connect, an operator's re-issue, a resume or a reboot, nobody has seen the arm move
under this process: its first move runs at the robot's `first_motion_speed` (rad/s), later
ones at `speed`. The generic host (`tether.devices.host.DeviceHost`) resets the policy on
connect, resume and reboot; the move path asks it for the limit of every move
(`DeviceHost.motion_limit`) and reports a completed move (`DeviceHost.motion_done`). The device
type only writes the speed in its own units (DYNAMIXEL: Profile Velocity).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tether.devices.config import RobotSpec

#: Why a move is a first motion (`MotionLimit.reason`).
FIRST_MOTION_REASONS = ("connect", "resume", "reboot", "reissue")


@dataclass(frozen=True)
class MotionLimit:
    """The speed limit of one coming move: `first` with its reason, and the cap in rad/s."""

    first: bool
    speed_rad_s: float
    reason: str | None = None  # one of FIRST_MOTION_REASONS when `first`

    def as_dict(self) -> dict[str, object]:
        return {"first": self.first, "speed_rad_s": self.speed_rad_s, "reason": self.reason}


def motion_speed(spec: RobotSpec, *, first: bool) -> float:
    """The speed limit of the coming move, rad/s."""
    return spec.first_motion_speed if first else spec.speed


class FirstMotion:
    """Which robots have moved since their last (re)connect, re-issue, resume or reboot."""

    def __init__(self) -> None:
        self._moved: set[str] = set()
        self._why: dict[str, str] = {}
        self._lock = threading.Lock()

    def due(self, robot: str) -> bool:
        """True while the robot's next move is a first motion."""
        with self._lock:
            return robot not in self._moved

    def limit(self, spec: RobotSpec, *, reissue: bool = False) -> MotionLimit:
        """The limit of `spec`'s coming move; `reissue`: the move is an operator's re-issue
        (always a first motion: the arm may stand where nobody expects it)."""
        with self._lock:
            if reissue:
                return MotionLimit(True, motion_speed(spec, first=True), "reissue")
            if spec.name in self._moved:
                return MotionLimit(False, motion_speed(spec, first=False))
            reason = self._why.get(spec.name, "connect")
            return MotionLimit(True, motion_speed(spec, first=True), reason)

    def moved(self, robot: str) -> None:
        """A move of `robot` completed: the next one is not a first motion."""
        with self._lock:
            self._moved.add(robot)

    def reset(self, robot: str | None = None, *, reason: str = "connect") -> None:
        """The next move of `robot` (of every robot when None) is a first motion again."""
        if reason not in FIRST_MOTION_REASONS:
            raise ValueError(f"reason {reason!r} is not one of {FIRST_MOTION_REASONS}")
        with self._lock:
            if robot is None:
                self._moved.clear()
                self._why = dict.fromkeys(self._why, reason)
            else:
                self._moved.discard(robot)
                self._why[robot] = reason


__all__ = ["FIRST_MOTION_REASONS", "FirstMotion", "MotionLimit", "motion_speed"]
