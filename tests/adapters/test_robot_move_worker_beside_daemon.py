"""`tether worker` with the robot_move family beside the `tether serve` that owns the host's
ports: the daemon's workers run the host's moves, and a worker that cannot open the ports
would claim moves it cannot drive (each parked for an operator as if the bus were dead). It
refuses to start, naming the daemon; without a daemon it starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tether.emulators.dynamixel import DynamixelEmulator

from tests._serve import clean_env, daemon, serve_config

FAMILIES = "tether.families.robot_move.family:families_from_env"


def _worker(config: Path, data: Path) -> subprocess.Popen[str]:
    data.mkdir(exist_ok=True)  # a worker's SQLite data dir is one that exists
    env = {**clean_env(), "TETHER_HOST_CONFIG": str(config)}
    argv = [sys.executable, "-m", "tether", "worker", str(data), "--families", FAMILIES]
    return subprocess.Popen(
        [*argv, "--host", "arm-host"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip


def test_a_robot_worker_beside_the_daemon_that_owns_the_ports_is_refused(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    config = serve_config(tmp_path, emulator.path, extra='[serve]\nhost_name = "arm-host"\n')
    with daemon(config) as (_, ready):
        refused = _worker(config, tmp_path / "worker-data")
        try:
            out, err = refused.communicate(timeout=60)
        finally:
            if refused.poll() is None:  # it started after all: never leave it running
                refused.kill()
                refused.communicate()
        assert refused.returncode == 7, (out, err)
        line = err.strip()
        assert "\n" not in line and "Traceback" not in err
        assert line.startswith("tether worker: port_owned: family physical_ai.robot_move")
        assert f"pid {ready['pid']}" in line and "tether serve" in line
    # No daemon: nobody owns the port, and the worker starts (and waits for work).
    worker = _worker(config, tmp_path / "worker-data")
    try:
        assert worker.stderr is not None
        assert worker.stderr.readline().startswith("tether worker ready:")
    finally:
        os.kill(worker.pid, signal.SIGTERM)
        worker.communicate(timeout=60)


def test_a_robot_worker_without_a_host_configuration_says_how_to_give_one(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in clean_env().items() if k != "TETHER_HOST_CONFIG"}
    (tmp_path / "data").mkdir()
    argv = [sys.executable, "-m", "tether", "worker", str(tmp_path / "data"), "--families"]
    done = subprocess.run([*argv, FAMILIES], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tether worker: bad_families: "), done.stderr
    assert "--config host.toml" in done.stderr
