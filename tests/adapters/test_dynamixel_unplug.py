"""An adapter unplugged under a running move or an owning host: one typed, protocol-neutral
error line, a documented exit code, no traceback, and nothing lost from the operation store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _dxl_setup import emulator_process, write_config
from tether.activities import ActivityKey, operation_id_for
from tether.adapters.dynamixel.driver import DxlBus
from tether.adapters.dynamixel.tables import PRESENT_POSITION
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE
from tether.transport import PortLost, TransportError

PORT_LOST_CODES = {"port_lost", "read_failed", "write_failed"}


def test_every_bus_call_on_an_unplugged_adapter_raises_port_lost() -> None:
    emulator = DynamixelEmulator([1]).start()
    bus = DxlBus.open(emulator.path, timeout_ms=400, lock_dir=None)
    try:
        assert bus.read_field(1, PRESENT_POSITION) == 2048
        emulator.stop()  # closes the pty: what the host sees when the USB adapter is pulled
        for call in (
            lambda: bus.read_field(1, PRESENT_POSITION),
            lambda: bus.ping(1),
            lambda: bus.write(1, 65, b"\x01"),
            bus.action,
        ):
            try:
                call()
            except PortLost as exc:
                assert exc.code in PORT_LOST_CODES and exc.details["port"] == emulator.path
                assert str(exc).startswith(f"{exc.code}: {emulator.path}: the adapter is gone")
            else:
                raise AssertionError("a call on an unplugged adapter succeeded")
    finally:
        bus.close()  # closing a dead port is not an error either


def test_an_adapter_unplugged_mid_move_ends_in_one_typed_line(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=0.2) as emu:
        config = write_config(tmp_path, emu.path)
        argv = ["move", "--config", str(config), "--robot", "arm", "--activity", "unplug"]
        env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
        with subprocess.Popen(
            [sys.executable, "-m", "tether", *argv, "--joint", "a=1.0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as move:
            assert move.stdout is not None and move.stderr is not None
            first = json.loads(move.stdout.readline())
            assert "progress" in first, first  # the ACTION is out: the arm is moving
            emu.unplug()
            out, err = move.communicate(timeout=120)
        lines = out.splitlines()
        final = json.loads(lines[-1])
        # The reconciliation cannot read the device (a dead bus after ACTION): parked for an
        # operator, one typed line, exit 3, and listed by `tether operator list`.
        assert move.returncode == 3, (out, err)
        assert final["status"] == "awaiting_decision" and final["reason"] == "device_unreadable"
        assert "Traceback" not in err and "termios" not in out + err
        listed = subprocess.run(
            [sys.executable, "-m", "tether", "operator", "--config", str(config), "list"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert [(i["key"], i["reason"]) for i in json.loads(listed.stdout)] == [
            ("local/physical_ai.robot_move.absolute/unplug", "device_unreadable")
        ]
        show = ["operator", "--config", str(config), "show"]
        shown = subprocess.run(
            [sys.executable, "-m", "tether", *show, f"local/{KIND_ABSOLUTE}/unplug", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        # The evidence holds SI units only: its pre-image is said to exist, not dumped in the
        # device's units (its control table's ticks).
        assert "goal_position" not in shown.stdout and "present_position" not in shown.stdout
        assert '"preimage": true' in shown.stdout, shown.stdout
    # Nothing lost: the bound request, the attempt and every frame sent are in the journal.
    op = MoveStore(tmp_path / "state" / "moves" / "robot_move").get(
        operation_id_for(ActivityKey("local", KIND_ABSOLUTE, "unplug"))
    )
    assert op is not None and op.attempts() == [1]
    assert [s["instruction"] for s in op.sent()][-1] == "action"


def test_a_stop_through_an_owner_whose_adapter_was_unplugged(tmp_path: Path) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        with subprocess.Popen(
            [sys.executable, "-m", "tether", "host", "serve", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as host:
            try:
                assert host.stdout is not None
                ready = [json.loads(host.stdout.readline()) for _ in range(2)]
                assert "socket" in ready[1], ready
                # The node stays: `tether stop` finds the owner by the lock of the resolved path
                # (a vanished node resolves to nothing the owner's lock names).
                emu.unplug(remove_node=False)
                done = subprocess.run(
                    [sys.executable, "-m", "tether", "stop", "--json", "--config", str(config)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                text = subprocess.run(
                    [sys.executable, "-m", "tether", "stop", "--config", str(config)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            finally:
                host.terminate()
            out, err = host.communicate(timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    report = json.loads(done.stdout)[0]
    assert report["via"] == "owner" and report["ok"] is False
    for joint in report["joints"]:
        assert joint["state"] == "unknown" and "PortLost: " in joint["error"]
    assert text.returncode == 1 and "unknown" in text.stdout and "Traceback" not in text.stderr
    # The owner shuts down cleanly too: its own safe-stop reports the lost port, no traceback.
    assert host.returncode == 0 and "Traceback" not in err
    assert json.loads(out.splitlines()[-1])["safe_stop"]["ok"] is False


def test_a_missing_adapter_is_a_protocol_neutral_transport_error() -> None:
    with pytest.raises(TransportError) as info:
        DxlBus.open("/dev/does-not-exist", lock_dir=None)
    assert info.value.code == "open_failed"
    assert info.value.details["port"] == "/dev/does-not-exist"


def test_a_reconnect_after_an_unplug_never_reaches_the_next_pty_opened(tmp_path: Path) -> None:
    """The flake this suite once showed under load: the dead emulator's /dev/pts/N is handed to
    the next pty any process opens (here an emulator started right after the unplug, as another
    test suite's would be). The port of the test is a link of its own, gone with the adapter,
    so the reconciliation finds no device (device_unreadable) and sends the other bus nothing."""
    with emulator_process(tmp_path, speed_scale=0.2) as emu:
        config = write_config(tmp_path, emu.path)
        pty = os.path.realpath(emu.path)
        argv = ["move", "--config", str(config), "--robot", "arm", "--activity", "reuse"]
        env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
        with subprocess.Popen(
            [sys.executable, "-m", "tether", *argv, "--joint", "a=1.0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as move:
            assert move.stdout is not None
            assert "progress" in json.loads(move.stdout.readline())
            emu.unplug()
            time.sleep(1.5)  # the move has let go of the dead pty: its number is free
            with DynamixelEmulator([1, 2]) as other:
                out, err = move.communicate(timeout=120)
                effectful = [
                    e for e in other.journal if e.instruction in ("write", "reg_write", "action")
                ]
                reused = other.path == pty
    assert move.returncode == 3, (out, err)
    assert json.loads(out.splitlines()[-1])["reason"] == "device_unreadable"
    assert effectful == [], (reused, effectful)
