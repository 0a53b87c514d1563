"""A standalone `tether move` runs on the data dir's own catalog and world ledger. On a host
whose configuration names its stores (`[serve] catalog`/`world`, a PostgreSQL catalog shared by
hosts, say) such a move would be in no store its daemon or its operators read: it is refused in
one line (`daemon_not_running`, exit 7) before anything is opened, written or sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _dxl_setup import write_config
from tether import _exit
from tether.emulators.dynamixel import DynamixelEmulator

from tests._serve import tether

STORES = [
    '[serve]\ncatalog = "postgresql://127.0.0.1:5432/test?options=-csearch_path%3Dnowhere"\n',
    '[serve]\nworld = "sqlite:///{tmp}/elsewhere/world.db"\n',
]


@pytest.mark.parametrize("table", STORES, ids=["pg-catalog", "sqlite-world"])
def test_a_standalone_move_on_named_stores_is_refused(
    emulator: DynamixelEmulator, tmp_path: Path, table: str
) -> None:
    config = write_config(tmp_path, emulator.path)
    config.write_text(config.read_text() + table.format(tmp=tmp_path))
    before = len(emulator.journal)
    argv = ["move", "--config", str(config), "--robot", "arm", "--joint", "a=0.2"]
    done = tether(*argv, "--activity", "m1", "--json")
    assert done.returncode == _exit.UNAVAILABLE, done.stdout + done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert (doc["status"], doc["code"]) == ("refused", "daemon_not_running")
    assert "tether serve --config" in doc["message"] and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("tether move: daemon_not_running: ")
    assert len(emulator.journal) == before  # nothing sent, nothing even read
    assert not list(tmp_path.rglob("catalog.db")) and not list(tmp_path.rglob("world.db"))
