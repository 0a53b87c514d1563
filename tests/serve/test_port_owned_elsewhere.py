"""A second `tether serve` (another state dir) for a robot whose port another daemon holds
refuses to start (exit 7), sending no frame, instead of waiting to take the robot over; so
does one beside a process of its own state dir that keeps the port."""

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
            # It names the process that holds the port (the daemon), and what to use.
            assert f"process {ready['pid']} (" in refusal["message"], refusal
            assert "use its host.toml" in refusal["message"], refusal
            stop = subprocess.run(
                [sys.executable, "-m", "tether", "stop", "--config", str(second)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert f"process {ready['pid']} (" in stop.stdout + stop.stderr, stop
            sent = [e for e in emu.journal()[before:] if e["instruction"] != "sync_read"]
            assert [e["instruction"] for e in sent if e["instruction"] != "ping"] == [], sent


def test_a_port_a_command_of_its_own_state_dir_holds_is_waited_for_then_connected(
    tmp_path: Path,
) -> None:
    """A command of the same state dir (a standalone `tether stop`, say) holds the port's
    identity lock for a moment while the daemon starts (`port_owned`): the start waits for it
    to let go and serves the robot."""
    import threading

    from tether.adapters.dynamixel.config import load_config
    from tether.devices.ports import IdentityLock, resolve_port

    with emulator_process(tmp_path) as emu:
        config = serve_config(tmp_path, emu.path, extra=SERVE)
        host = load_config(config)
        lock = IdentityLock(host.state_dir, resolve_port(host.ports["bus"]).key)
        lock.acquire(None)
        letting_go = threading.Timer(1.0, lock.release)
        letting_go.start()
        try:
            with daemon(config) as (_, ready):
                assert ready["unavailable"] == {}, ready
        finally:
            letting_go.cancel()
            lock.release()


def test_a_port_a_process_of_its_own_state_dir_keeps_refuses_the_start(tmp_path: Path) -> None:
    """A process of the same state dir that keeps the port (a `tether worker`, a standalone
    `tether move`) is a second controller of the robot on the same catalog: the start is
    refused (port_owned, exit 7), naming the holder's pid, and sends nothing."""
    import os

    from tether.adapters.dynamixel.config import load_config
    from tether.devices.ports import IdentityLock, resolve_port
    from tether.serve.daemon import PORT_OWNED_WAIT_S

    with emulator_process(tmp_path) as emu:
        config = serve_config(tmp_path, emu.path, extra=SERVE)
        host = load_config(config)
        lock = IdentityLock(host.state_dir, resolve_port(host.ports["bus"]).key)
        lock.acquire(None)
        try:
            before = len(emu.journal())
            done = subprocess.run(
                [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"],
                capture_output=True,
                text=True,
                timeout=120 + PORT_OWNED_WAIT_S,
            )
        finally:
            lock.release()
        assert done.returncode == _exit.UNAVAILABLE, (done.stdout, done.stderr)
        refusal = json.loads(done.stdout)
        assert refusal["code"] == "port_owned", refusal
        assert f"pid {os.getpid()}" in refusal["message"], refusal
        sent = [e["instruction"] for e in emu.journal()[before:]]
        assert [i for i in sent if i not in ("ping", "sync_read", "read")] == [], sent
