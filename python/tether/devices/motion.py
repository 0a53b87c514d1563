"""The first-motion speed limit, for every device type.

After a (re)connect, an operator's re-issue, a resume or a reboot, nobody has seen the arm move
under this process: its first move runs at the robot's `first_motion_speed` (rad/s), later
ones at `speed`. The device type writes the speed in its own units; this module only decides.
"""

from __future__ import annotations

import threading

from tether.devices.config import RobotSpec


def motion_speed(spec: RobotSpec, *, first: bool) -> float:
    """The speed limit of the coming move, rad/s."""
    return spec.first_motion_speed if first else spec.speed


class FirstMotion:
    """Which robots have moved since their last (re)connect, re-issue, resume or reboot."""

    def __init__(self) -> None:
        self._moved: set[str] = set()
        self._lock = threading.Lock()

    def due(self, robot: str) -> bool:
        """True while the robot's next move is a first motion."""
        with self._lock:
            return robot not in self._moved

    def moved(self, robot: str) -> None:
        with self._lock:
            self._moved.add(robot)

    def reset(self, robot: str | None = None) -> None:
        """The next move of `robot` (of every robot when None) is a first motion again."""
        with self._lock:
            if robot is None:
                self._moved.clear()
            else:
                self._moved.discard(robot)


__all__ = ["FirstMotion", "motion_speed"]
