"""`tether status` of a daemon that does not answer (stopped with SIGSTOP here; a stalled
storage or bus looks the same from outside) says so within its `--timeout`, naming the
daemon's pid, and exits 7; before, it waited 30 s and said "TimeoutError: timed out"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tether import _exit

from tests._serve import clean_env, tether

SIM = "tether.serve.families:sim_families"


def test_status_of_a_daemon_that_does_not_answer_says_so_within_its_timeout(
    tmp_path: Path,
) -> None:
    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{tmp_path / "state"}"\n[serve]\nsse = "off"\nfamilies = ["{SIM}"]\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        assert tether("status", "--config", str(config), "--json").returncode == _exit.OK
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            done = tether("status", "--config", str(config), "--json", "--timeout", "1")
            took = time.monotonic() - began
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert done.returncode == _exit.UNAVAILABLE, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert doc["code"] == "owner_no_answer" and doc["details"]["pid"] == proc.pid, doc
        assert f"pid {proc.pid}" in doc["message"] and "within 1 s" in doc["message"]
        assert took < 8, took  # the interpreter's start-up, then one second
        assert tether("status", "--config", str(config)).returncode == _exit.OK  # answers again
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
