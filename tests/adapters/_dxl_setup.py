"""Shared setup for robot-move tests: an emulator process or thread and a host configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import hash_credential
from tether.emulators.dynamixel import control_request

CREDENTIAL = "correct horse battery staple"
_HASH = hash_credential(CREDENTIAL)
TARGETS = {"a": 0.5, "b": -0.3}
GOALS = {1: tables.radians_to_ticks(0.5), 2: tables.radians_to_ticks(-0.3)}


def write_config(directory: Path, url: str) -> Path:
    path = directory / "host.toml"
    path.write_text(
        f"""
[host]
state_dir = "{directory / "state"}"
[operators.alice]
credential = "{_HASH}"
[ports.bus]
url = "{url}"
timeout_ms = 400
[robots.arm]
port = "bus"
safe_stop = "hold"
speed = 2.0
first_motion_speed = 0.5
[[robots.arm.joints]]
name = "a"
id = 1
min = -1.5
max = 1.5
[[robots.arm.joints]]
name = "b"
id = 2
min = -1.5
max = 1.5
"""
    )
    return path


@dataclass
class EmulatorProcess:
    path: str
    control: str
    journal_path: Path
    proc: subprocess.Popen[str] | None = None

    def unplug(self, *, remove_node: bool = True) -> None:
        """The adapter goes away: the emulator process dies and its device node with it (as a
        USB adapter's node vanishes). The test's port is a link of its own to the pty: the
        pty's number (/dev/pts/N) is reused by the next pty any process opens (another test
        suite's emulator on this machine), which a reconnect must never reach."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)
        if remove_node:
            Path(self.path).unlink(missing_ok=True)

    def journal(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = control_request(self.control, {"op": "journal"})
        return result

    def request(self, **req: Any) -> Any:
        return control_request(self.control, req)


@contextmanager
def emulator_process(directory: Path, speed_scale: float = 20.0) -> Iterator[EmulatorProcess]:
    control = str(directory / "emu.sock")
    journal = directory / "journal.jsonl"
    link = directory / "emu.tty"
    argv = [
        "emulate",
        "dynamixel",
        "--ids",
        "1,2",
        "--control",
        control,
        "--journal",
        str(journal),
        "--speed-scale",
        str(speed_scale),
        "--link",
        str(link),
    ]
    with subprocess.Popen(
        [sys.executable, "-m", "tether", *argv], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip()  # the pty; the tests use their link
            path = str(link)
            deadline = time.monotonic() + 30
            while not os.path.exists(control):
                assert time.monotonic() < deadline, "emulator control socket never appeared"
                time.sleep(0.01)
            yield EmulatorProcess(path, control, journal, proc)
        finally:
            proc.terminate()


def run_worker(
    config: Path,
    *extra: str,
    crash_at: str | None = None,
    activity: str = "move-1",
    joints: dict[str, float] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TETHER_CRASH_AT", None)
    if crash_at:
        env["TETHER_CRASH_AT"] = crash_at
    argv = ["move", "--config", str(config), "--robot", "arm", "--activity", activity]
    argv += ["--lease-ms", "1500", *extra]
    for name, value in (joints or TARGETS).items():
        argv += ["--joint", f"{name}={value}"]
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    finals = [line for line in lines if "progress" not in line]
    assert finals, (done.returncode, done.stdout, done.stderr)
    result: dict[str, Any] = finals[-1]
    return result


def target_actions(journal: list[dict[str, Any]], goals: dict[int, int]) -> dict[int, int]:
    """How many ACTIONs applied each joint's target goal (a duplicate would count 2)."""
    counts = dict.fromkeys(goals, 0)
    for entry in journal:
        if entry["instruction"] == "action" and entry["id"] in goals and entry["executed"]:
            if (
                entry["address"] == tables.GOAL_POSITION.address
                and entry["data"] == tables.encode(tables.GOAL_POSITION, goals[entry["id"]]).hex()
            ):
                counts[entry["id"]] += 1
    return counts


def settled(snapshot: Callable[[], dict[str, Any]], seconds: float = 30.0) -> dict[str, Any]:
    """A servo's control table once it reports Moving 0. A hold writes Goal = the Present it
    read; the shaft may still be a fraction of a tick short at that instant."""
    deadline = time.monotonic() + seconds
    state = snapshot()
    while state["moving"]:
        assert time.monotonic() < deadline, f"servo never settled: {state}"
        time.sleep(0.01)
        state = snapshot()
    return state
