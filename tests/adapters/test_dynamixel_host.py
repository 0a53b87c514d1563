"""The owning host, its control socket and `tether stop`, with real processes on the pty."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from _dxl_setup import settled
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import load_config
from tether.adapters.dynamixel.driver import DxlBus, is_locked, lock_path, resolve_port
from tether.adapters.dynamixel.host import RobotHost, owner_socket, send_request
from tether.emulators.dynamixel import DynamixelEmulator
from tether.errors import PortBusy


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator([1, 2], speed_scale=0.05) as emu:
        yield emu


def write_config(tmp_path: Path, url: str, policy: str = "hold") -> Path:
    path = tmp_path / "host.toml"
    path.write_text(
        f"""
[host]
state_dir = "{tmp_path / "state"}"
[ports.bus]
url = "{url}"
timeout_ms = 400
[robots.arm]
port = "bus"
safe_stop = "{policy}"
[[robots.arm.joints]]
name = "a"
id = 1
min = -2
max = 2
[[robots.arm.joints]]
name = "b"
id = 2
min = -2
max = 2
"""
    )
    return path


def start_moving(emulator: DynamixelEmulator) -> None:
    """Put both servos in a slow motion toward a far goal, as a running move would."""
    for dxl_id in (1, 2):
        servo = emulator.servos[dxl_id]
        servo.set(tables.TORQUE_ENABLE, 1)
        servo.set(tables.PROFILE_VELOCITY, 5)
        servo.set(tables.GOAL_POSITION, 3000)


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv], capture_output=True, text=True, timeout=60
    )


def test_stop_without_an_owner_opens_the_port_itself(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    config = write_config(tmp_path, emulator.path, policy="torque_off")
    start_moving(emulator)
    done = run_cli("stop", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout)
    assert reports[0]["via"] == "direct" and reports[0]["ok"] is True
    assert [(j["joint"], j["state"], j["torque"]) for j in reports[0]["joints"]] == [
        ("a", "limp", False),
        ("b", "limp", False),
    ]
    assert emulator.snapshot(1)["torque_enable"] == 0 and emulator.snapshot(2)["torque_enable"] == 0


def test_stop_goes_through_the_owning_host(emulator: DynamixelEmulator, tmp_path: Path) -> None:
    config_path = write_config(tmp_path, emulator.path)
    config = load_config(config_path)
    with subprocess.Popen(
        [sys.executable, "-m", "tether", "host", "serve", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        text=True,
    ) as host:
        try:
            assert host.stdout is not None
            lines = [json.loads(host.stdout.readline()) for _ in range(2)]
            assert lines[0]["identity"]["servos"][0] == {"id": 1, "model": 1030, "firmware": 45}
            assert owner_socket(config, "bus") == lines[1]["socket"]
            with pytest.raises(PortBusy):
                DxlBus.open_config(config.ports["bus"], lock_dir=config.state_dir)
            start_moving(emulator)
            time.sleep(0.05)
            done = run_cli("stop", "--json", "--config", str(config_path))
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)[0]
            assert report["via"] == "owner" and report["ok"] is True
            assert [j["state"] for j in report["joints"]] == ["held", "held"]
            for dxl_id in (1, 2):
                state = settled(partial(emulator.snapshot, dxl_id))
                assert state["goal_position"] == state["present_position"] < 3000
                assert state["torque_enable"] == 1
            state = send_request(lines[1]["socket"], {"op": "state", "robot": "arm"})
            assert state["joints"]["1"]["registered_instruction"] == 0
        finally:
            host.terminate()
        out = host.communicate(timeout=30)[0]
    assert host.returncode == 0
    assert json.loads(out.splitlines()[-1])["safe_stop"]["ok"] is True
    assert not is_locked(lock_path(config.state_dir, resolve_port(config.ports["bus"]).key))


def test_host_close_always_safe_stops(emulator: DynamixelEmulator, tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, emulator.path, policy="torque_off"))
    with pytest.raises(RuntimeError), RobotHost(config) as host:
        host.connect("arm")
        start_moving(emulator)
        raise RuntimeError("worker crashed mid-move")
    assert emulator.snapshot(1)["torque_enable"] == 0


def test_stop_reports_a_missing_port(tmp_path: Path) -> None:
    """A port that does not open: nothing reached the robot, and the report says so (it said
    "NOT in the state its policy asks", as for a joint found limp), and that the latch was
    written first, and where the stop must come from now."""
    config = write_config(tmp_path, "/dev/does-not-exist")
    done = run_cli("stop", "--json", "--config", str(config))
    assert done.returncode == 1
    report = json.loads(done.stdout)[0]
    assert report["ok"] is False and report["error"].startswith("TransportError: open_failed:")
    assert (report["joints"], report["latched"]) == ([], True), report
    text = run_cli("stop", "--config", str(config))
    assert text.returncode == 1 and "Traceback" not in text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "arm (safe_stop hold): NOT STOPPED: not confirmed, no joint was read back"
    assert (
        lines[2] == "  latched: no move of Tether's runs on it until `tether operator resume arm`"
    )
    assert "hardware emergency stop" in lines[3], lines


def test_operator_hash_reads_stdin_and_prints_the_operators_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "operator", "hash", "--name", "ann"],
        input="s3cret-pass\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[operators.ann]" and lines[1].startswith('credential = "$argon2id$')
    assert "s3cret" not in done.stdout + done.stderr


def test_a_deep_state_dir_still_gets_a_bindable_socket(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    config = load_config(write_config(tmp_path, emulator.path))
    config = dataclasses.replace(config, state_dir=deep)
    with RobotHost(config) as host:
        host.connect("arm")
        assert len(host.socket_path) <= 100
        assert owner_socket(config, "bus") == host.socket_path
        assert send_request(host.socket_path, {"op": "identity"})["arm"]["servos"][1]["id"] == 2


def test_an_idle_client_does_not_delay_a_stop(emulator: DynamixelEmulator, tmp_path: Path) -> None:
    import socket

    config = load_config(write_config(tmp_path, emulator.path))
    with RobotHost(config) as host:
        host.connect("arm")
        idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        idle.connect(host.socket_path)  # connected, never sends a request
        try:
            started = time.monotonic()
            reports = send_request(host.socket_path, {"op": "stop", "robot": "arm"}, timeout=5)
            assert time.monotonic() - started < 2.0
            assert [j["state"] for j in reports[0]["joints"]] == ["limp", "limp"]  # torque was off
        finally:
            idle.close()
