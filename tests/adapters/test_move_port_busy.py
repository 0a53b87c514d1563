"""A standalone `tether move` of a host configuration whose robot's port another process owns
(the `tether serve` of another configuration drives the same bus) is refused `port_busy` (exit
7) before anything is recorded: no move is admitted that no attempt could run or read, and
nothing reaches the bus. Before, the move was admitted and parked for an operator as
`device_unreadable`."""

from __future__ import annotations

import json
from pathlib import Path

from _dxl_setup import write_config
from tether import _exit
from tether.activities import ActivityKey, Catalog
from tether.emulators.dynamixel import DynamixelEmulator
from tether.storage._urls import sqlite_url

from tests._serve import EFFECTFUL, daemon, serve_config, tether

KIND = "physical_ai.robot_move.absolute"


def _writes(emulator: DynamixelEmulator) -> int:
    return sum(1 for e in emulator.journal if e.instruction in EFFECTFUL)


def test_a_move_on_a_port_another_daemon_owns_is_refused_and_recorded_nowhere(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    owner = serve_config(tmp_path / "a", emulator.path)
    other = write_config(tmp_path / "b", emulator.path)  # the same bus, another state dir
    with daemon(owner) as (proc, _ready):
        before = _writes(emulator)
        argv = ["move", "--config", str(other), "--robot", "arm", "--joint", "a=0.2"]
        done = tether(*argv, "--activity", "m1", "--json")
        assert proc.poll() is None  # the owner runs on
        # No write, motion or reboot reached the bus (the owner's own stop on its way out
        # writes goals: counted before it).
        assert _writes(emulator) == before
    assert done.returncode == _exit.UNAVAILABLE, done.stdout + done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert (doc["status"], doc["code"]) == ("refused", "port_busy"), doc
    assert doc["details"]["port"] == emulator.path
    assert done.stderr.startswith("tether move: port_busy: ") and "Traceback" not in done.stderr
    for catalog in (tmp_path / "b").rglob("catalog.db"):
        with Catalog.open(sqlite_url(catalog)) as cat:
            assert cat.get(ActivityKey("local", KIND, "m1")) is None
