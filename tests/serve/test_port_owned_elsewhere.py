"""A second `tether serve` (another state dir) for a robot whose port another daemon holds
refuses to start (exit 7), sending no frame, instead of waiting to take the robot over."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tether import _exit

from tests._serve import daemon, serve_config
from tests.adapters._dxl_setup import emulator_process

SERVE = '\n[serve]\nsse = "off"\n'


def test_a_port_another_daemon_holds_refuses_the_start_and_sends_nothing(tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    with emulator_process(tmp_path) as emu:
        first = serve_config(first_dir, emu.path, extra=SERVE)
        second = serve_config(second_dir, emu.path, extra=SERVE)
        with daemon(first) as (_, ready):
            assert ready["unavailable"] == {}
            before = len(emu.journal())
            done = subprocess.run(
                [sys.executable, "-m", "tether", "serve", "--config", str(second), "--json"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == _exit.UNAVAILABLE, (done.stdout, done.stderr)
            refusal = json.loads(done.stdout)
            assert refusal["code"] == "port_busy", refusal
            sent = [e for e in emu.journal()[before:] if e["instruction"] != "sync_read"]
            assert [e["instruction"] for e in sent if e["instruction"] != "ping"] == [], sent
