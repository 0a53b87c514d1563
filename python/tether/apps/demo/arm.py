"""The demo's emulated DYNAMIXEL arm and the host.toml it generates for the daemon.

The demo starts a `DynamixelEmulator` (two X-series servos on a real pty, served by a thread of
the demo) and writes `<data_dir>/host.toml`: the arm on that pty, the demo's operator with an
argon2id hash of its credential, and a `[serve]` table on the demo's data dir. Those ports are
emulators because the demo created them in this process; that is the only proof there is, so
a port of a host.toml given with `--config` always counts as real hardware.

One power loss is injected (`PowerLoss`): once the ACTION of the chosen move has been applied
and its shafts are a third of the way to their goals, every servo reboots (RAM wiped: torque
off, goal = present). The move is then Unknown and parks for an operator.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.adapters.dynamixel import tables
from tether.devices.credentials import principal_table
from tether.emulators.dynamixel import DynamixelEmulator, JournalEntry

ROBOT = "arm"
#: Joint name -> DYNAMIXEL id of the emulated arm.
JOINTS = {"shoulder": 1, "elbow": 2}
LIMIT_RAD = 1.5
#: The arm's moves (absolute, rad), distinct so the emulator's journal attributes each ACTION.
TARGETS = (
    {"shoulder": 0.6, "elbow": -0.4},
    {"shoulder": -0.5, "elbow": 0.7},
    {"shoulder": 0.2, "elbow": 0.3},
    {"shoulder": -0.8, "elbow": -0.6},
    {"shoulder": 0.9, "elbow": 0.1},
    {"shoulder": 0.0, "elbow": 0.0},
)
#: The world the arm's moves are submitted to (the reaches have their own).
ARM_WORLD = "demo-arm"
MOVE_KIND = "physical_ai.robot_move.absolute"


def move_id(index: int) -> str:
    return f"move-{index:04d}"


def goals_ticks(target: dict[str, float]) -> dict[int, int]:
    return {JOINTS[name]: tables.radians_to_ticks(rad) for name, rad in target.items()}


class PowerLoss:
    """Power-cycles the emulator once, right after the ACTION of one move, before it settles
    (see the module doc). `fired` is set once it happened."""

    def __init__(self, emulator: DynamixelEmulator, goals: dict[int, int] | None) -> None:
        self.emulator = emulator
        self.goals = goals
        self.fired = threading.Event()
        self._start: dict[int, int] = {}
        self._armed = False

    def disarm(self) -> None:
        """Inject nothing (the move ran in an earlier run: its power loss happened then)."""
        self.goals = None

    def saw(self, entry: JournalEntry) -> None:
        """An entry the emulator published (under its lock)."""
        if self.goals is None or self.fired.is_set() or entry.instruction != "action":
            return
        goal = self.goals.get(entry.id)
        if goal is None or not entry.executed or entry.address != tables.GOAL_POSITION.address:
            return
        if entry.data != tables.encode(tables.GOAL_POSITION, goal).hex():
            return
        self._start[entry.id] = self.emulator.servos[entry.id].get(tables.PRESENT_POSITION)
        self._armed = set(self._start) == set(self.goals)

    def check(self) -> None:
        """Before each received frame: fire once the shafts are a third of the way."""
        if not self._armed or self.fired.is_set() or self.goals is None:
            return
        servos = self.emulator.servos
        for dxl_id, goal in self.goals.items():
            start = self._start[dxl_id]
            present = servos[dxl_id].get(tables.PRESENT_POSITION)
            if abs(goal - start) and 3 * abs(present - start) < abs(goal - start):
                return
        self.emulator.power_cycle()
        self.fired.set()


class DemoArm(DynamixelEmulator):
    """The emulated arm: a `DynamixelEmulator` whose journal feeds the power-loss trigger."""

    def __init__(self, journal_path: Path, power_loss_goals: dict[int, int] | None) -> None:
        super().__init__(sorted(JOINTS.values()), journal_path=journal_path, speed_scale=1.0)
        self.journal_path = journal_path
        self.power_loss = PowerLoss(self, power_loss_goals)

    def _publish(self, entry: JournalEntry) -> None:
        super()._publish(entry)
        self.power_loss.saw(entry)

    def handle_bytes(self, data: bytes) -> bytes:
        with self._lock:
            self.power_loss.check()
            return super().handle_bytes(data)

    def actions(self, target: dict[str, float]) -> int:
        """How many ACTIONs applied this move's goals (the most over its joints), from the
        journal file, which keeps the frames of earlier runs on this data dir too (an emulator
        killed with its demo)."""
        goals = goals_ticks(target)
        counts = dict.fromkeys(goals, 0)
        with self._lock:
            if self._journal_file is not None:
                self._journal_file.flush()
        try:
            text = Path(self.journal_path).read_text(encoding="utf-8")
        except OSError:
            return 0
        for line in text.splitlines():
            try:
                e = json.loads(line)
            except ValueError:  # a line cut short by a kill
                continue
            if e.get("instruction") != "action" or not e.get("executed"):
                continue
            dxl_id = e.get("id")
            if dxl_id not in goals or e.get("address") != tables.GOAL_POSITION.address:
                continue
            if e.get("data") == tables.encode(tables.GOAL_POSITION, goals[dxl_id]).hex():
                counts[dxl_id] += 1
        return max(counts.values())


@dataclass(frozen=True)
class Generated:
    """The generated host.toml and what the demo knows about it."""

    path: Path
    state_dir: Path
    operator: str | None
    emulated_ports: frozenset[str]


def write_host_toml(
    data_dir: Path,
    *,
    pty: str | None,
    operator: str | None,
    credential_hash: str | None,
    workers: int,
    lease_ms: int,
) -> Generated:
    """`<data_dir>/host.toml` (0600): the arm on `pty` (no arm when None), the operator, and
    a `[serve]` table on `data_dir` (families: robot moves when there is an arm, and the sim
    reaches)."""
    state_dir = data_dir / "state"
    families = (["tether.families.robot_move.family:serve_families"] if pty else []) + [
        "tether.serve.families:sim_families"
    ]
    lines = [
        "# Generated by `tether demo` at each start: its emulated arm and its operator.",
        "[host]",
        f"state_dir = {json.dumps(str(state_dir))}",
        "",
    ]
    if operator is not None and credential_hash is not None:
        lines += [principal_table(operator, "operator", credential_hash), ""]
    if pty is not None:
        lines += [
            "[ports.demo_bus]",
            'type = "dynamixel"',
            f"url = {json.dumps(pty)}",
            "timeout_ms = 400",
            "",
            f"[robots.{ROBOT}]",
            'port = "demo_bus"',
            'safe_stop = "hold"',
            "speed = 1.0",
            "first_motion_speed = 0.5",
            "",
        ]
        for name, dxl_id in JOINTS.items():
            lines += [
                f"[[robots.{ROBOT}.joints]]",
                f'name = "{name}"',
                f"id = {dxl_id}",
                f"min = {-LIMIT_RAD}",
                f"max = {LIMIT_RAD}",
                "",
            ]
    lines += [
        "[serve]",
        f"data_dir = {json.dumps(str(data_dir))}",
        f"families = {json.dumps(families)}",
        'sse = "off"',
        f"workers = {workers}",
        f"lease_ms = {lease_ms}",
        "settle_timeout_s = 20.0",
    ]
    if pty:  # the arm's parked move can be decided from the operator console's page too
        lines.append('console = "127.0.0.1:0"')
    path = data_dir / "host.toml"
    tmp = path.with_name("host.toml.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    ports = frozenset({"demo_bus"} if pty else set())
    return Generated(path, state_dir, operator, ports)


def config_ports(config: Any) -> list[str]:
    """The port names of a host configuration."""
    return sorted(getattr(config, "ports", {}) or {})


__all__ = [
    "ARM_WORLD",
    "JOINTS",
    "MOVE_KIND",
    "ROBOT",
    "TARGETS",
    "DemoArm",
    "Generated",
    "PowerLoss",
    "goals_ticks",
    "move_id",
    "write_host_toml",
]
