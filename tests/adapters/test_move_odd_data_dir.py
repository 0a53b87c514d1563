"""A data dir is a name, whatever it holds: a standalone `tether move` on a host whose state
dir's path holds `#`, `?` and `%` runs on its own catalog and world ledger (their default URLs
encode those characters, as `tether db` then reads them), rather than being refused as a URL
with a query or a fragment."""

from __future__ import annotations

import json
from pathlib import Path

from _dxl_setup import write_config
from tether.emulators.dynamixel import DynamixelEmulator
from tether.storage._urls import sqlite_url

from tests._serve import tether


def test_a_move_runs_in_a_data_dir_whose_path_holds_url_characters(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    home = tmp_path / "lab #2?x%41"
    home.mkdir()
    config = write_config(home, emulator.path)
    argv = ["move", "--config", str(config), "--robot", "arm", "--joint", "a=0.2", "--json"]
    done = tether(*argv, "--activity", "m1")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert (doc["status"], doc["conclusion"]) == ("done", "executed"), doc
    (catalog,) = home.rglob("catalog.db")  # in the dir named, not a truncated path
    assert catalog.is_relative_to(home)
    status = tether("db", "status", sqlite_url(catalog), "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert [s["store"] for s in json.loads(status.stdout)["stores"]] == ["catalog"]
