"""The pty emulator driven by the official dynamixel-sdk (an independent client), plus its
control-table rules and the `tether emulate dynamixel` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from dynamixel_sdk import (
    COMM_RX_TIMEOUT,
    COMM_SUCCESS,
    GroupSyncRead,
    GroupSyncWrite,
    PacketHandler,
    PortHandler,
    port_handler,
)
from tether import _core
from tether.adapters.dynamixel import tables
from tether.emulators.dynamixel import DynamixelEmulator, Fault, control_request


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator(
        [1, 2], journal_path=tmp_path / "journal.jsonl", speed_scale=20.0
    ) as emu:
        yield emu


@pytest.fixture(autouse=True)
def patient_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK waits 2 x LATENCY_TIMER (16 ms, the FTDI default) for a status; on a busy shared
    test machine that is too short for any emulator. Raise the knob the SDK exposes for it."""
    monkeypatch.setattr(port_handler, "LATENCY_TIMER", 150)


@pytest.fixture
def sdk(emulator: DynamixelEmulator) -> Iterator[tuple[PortHandler, PacketHandler]]:
    port = PortHandler(emulator.path)
    assert port.openPort()
    assert port.setBaudRate(57600)
    try:
        yield port, PacketHandler(2.0)
    finally:
        port.closePort()


def eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll until `check()` holds; the bound only stops a broken run, it asserts no speed."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        time.sleep(0.01)


def test_sdk_ping_reads_model_number(sdk: tuple[PortHandler, PacketHandler]) -> None:
    port, handler = sdk
    for dxl_id in (1, 2):
        model, result, error = handler.ping(port, dxl_id)
        assert (model, result, error) == (1030, COMM_SUCCESS, 0)
    _, result, _ = handler.ping(port, 3)
    assert result == COMM_RX_TIMEOUT


def test_sdk_write_read_and_motion(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    port, handler = sdk
    assert handler.write1ByteTxRx(port, 1, 64, 1)[:2] == (COMM_SUCCESS, 0)
    assert handler.write4ByteTxRx(port, 1, 116, 2500)[:2] == (COMM_SUCCESS, 0)
    value, result, error = handler.read4ByteTxRx(port, 1, 116)
    assert (value, result, error) == (2500, COMM_SUCCESS, 0)

    def arrived() -> bool:
        present, result, _ = handler.read4ByteTxRx(port, 1, 132)
        moving, _, _ = handler.read1ByteTxRx(port, 1, 122)
        return result == COMM_SUCCESS and present == 2500 and moving == 0

    eventually(arrived)
    names = [e.instruction for e in emulator.journal]
    assert names[:3] == ["write", "write", "read"]


def test_sdk_sync_write_and_sync_read(sdk: tuple[PortHandler, PacketHandler]) -> None:
    port, handler = sdk
    torque = GroupSyncWrite(port, handler, 64, 1)
    goal = GroupSyncWrite(port, handler, 116, 4)
    for dxl_id, target in ((1, 1000), (2, 3000)):
        assert torque.addParam(dxl_id, [1])
        assert goal.addParam(dxl_id, list(target.to_bytes(4, "little")))
    assert torque.txPacket() == COMM_SUCCESS
    assert goal.txPacket() == COMM_SUCCESS
    reader = GroupSyncRead(port, handler, 132, 4)
    assert reader.addParam(1) and reader.addParam(2)

    def arrived() -> bool:
        if reader.txRxPacket() != COMM_SUCCESS:
            return False
        return (reader.getData(1, 132, 4), reader.getData(2, 132, 4)) == (1000, 3000)

    eventually(arrived)


def test_sdk_sees_device_errors(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    port, handler = sdk
    # Present Position is read-only: Access Error (7).
    assert handler.write4ByteTxRx(port, 1, 132, 5) == (COMM_SUCCESS, 7)
    # Outside Min/Max Position Limit: Data Limit Error (6).
    assert handler.write4ByteTxRx(port, 1, 116, 5000) == (COMM_SUCCESS, 6)
    # Two bytes of a four-byte item: Data Length Error (5).
    assert handler.write2ByteTxRx(port, 1, 116, 5) == (COMM_SUCCESS, 5)
    # EEPROM while torque is on: Access Error.
    assert handler.write1ByteTxRx(port, 1, 64, 1) == (COMM_SUCCESS, 0)
    assert handler.write4ByteTxRx(port, 1, 48, 4000) == (COMM_SUCCESS, 7)
    # ACTION with nothing registered: Instruction Error (2). The SDK never reads an ACTION's
    # status, so the journal shows what the device answered.
    assert handler.action(port, 1) == COMM_SUCCESS
    eventually(lambda: emulator.journal[-1].instruction == "action")
    assert (emulator.journal[-1].error, emulator.journal[-1].status) == (2, "sent")


def test_a_cut_header_does_not_make_the_emulator_deaf(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    # A header for id 1 whose length field claims 4095 more bytes, then nothing: the next
    # well-formed packet is answered, not swallowed into the bogus frame.
    port, handler = sdk
    port.writePort([0xFF, 0xFF, 0xFD, 0x00, 0x01, 0xFF, 0x0F])
    assert handler.ping(port, 1)[:2] == (1030, COMM_SUCCESS)
    assert handler.read4ByteTxRx(port, 2, 132) == (2048, COMM_SUCCESS, 0)
    assert emulator.frame_errors == 1


def test_reg_write_waits_for_action(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    port, handler = sdk
    assert handler.regWriteTxRx(port, 1, 116, 4, list((1500).to_bytes(4, "little")))[:2] == (
        COMM_SUCCESS,
        0,
    )
    assert handler.read1ByteTxRx(port, 1, 69)[0] == 1
    assert handler.read4ByteTxRx(port, 1, 116)[0] == 2048
    assert handler.action(port, 0xFE) == COMM_SUCCESS
    eventually(lambda: emulator.snapshot(1)["goal_position"] == 1500)
    assert emulator.snapshot(1)["registered_instruction"] == 0


def test_reboot_wipes_ram_and_keeps_eeprom(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    port, handler = sdk
    assert handler.write4ByteTxRx(port, 1, 48, 3900) == (COMM_SUCCESS, 0)  # EEPROM, torque off
    assert handler.write1ByteTxRx(port, 1, 64, 1) == (COMM_SUCCESS, 0)
    handler.regWriteTxRx(port, 1, 116, 4, list((1800).to_bytes(4, "little")))
    assert handler.reboot(port, 1) == (COMM_SUCCESS, 0)
    state = emulator.snapshot(1)
    assert (state["torque_enable"], state["registered_instruction"]) == (0, 0)
    assert state["goal_position"] == state["present_position"]
    assert state["max_position_limit"] == 3900


def test_status_return_level_silences_writes(sdk: tuple[PortHandler, PacketHandler]) -> None:
    port, handler = sdk
    assert handler.write1ByteTxRx(port, 2, 68, 1) == (COMM_SUCCESS, 0)
    assert handler.write1ByteTxRx(port, 2, 65, 1)[0] == COMM_RX_TIMEOUT  # applied, unanswered
    assert handler.read1ByteTxRx(port, 2, 65) == (1, COMM_SUCCESS, 0)
    assert handler.write1ByteTxRx(port, 2, 68, 0)[0] == COMM_RX_TIMEOUT
    assert handler.read1ByteTxRx(port, 2, 65)[1] == COMM_RX_TIMEOUT
    assert handler.ping(port, 2)[1] == COMM_SUCCESS


def test_alert_bit_and_hardware_error(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    port, handler = sdk
    handler.write1ByteTxRx(port, 1, 64, 1)
    emulator.inject(Fault("alert", id=1, value=0x20))
    value, result, error = handler.read1ByteTxRx(port, 1, 70)
    assert (value, result) == (0x20, COMM_SUCCESS)
    assert error & 0x80
    assert tables.hardware_errors(value) == ["overload"]
    assert handler.read1ByteTxRx(port, 1, 64)[0] == 0  # shutdown turned torque off
    assert handler.read1ByteTxRx(port, 2, 70)[2] == 0  # the other servo is fine


def test_an_error_shutdown_does_not_enable_leaves_torque_on(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    """Input voltage (bit 0) is not in Shutdown's default 0x34: the servo raises the alert and
    keeps its torque (it dropped it for every error, so a test could never meet a servo that
    reports an error while holding). Enabled in Shutdown, it drops torque."""
    port, handler = sdk
    handler.write1ByteTxRx(port, 1, 64, 1)
    emulator.inject(Fault("alert", id=1, value=0x01))
    value, result, error = handler.read1ByteTxRx(port, 1, 70)
    assert (value, result) == (0x01, COMM_SUCCESS) and error & 0x80
    assert handler.read1ByteTxRx(port, 1, 64)[0] == 1
    handler.write1ByteTxRx(port, 2, 63, 0x35)  # EEPROM: servo 2's torque is off
    handler.write1ByteTxRx(port, 2, 64, 1)
    emulator.inject(Fault("alert", id=2, value=0x01))
    assert handler.read1ByteTxRx(port, 2, 64)[0] == 0


@pytest.mark.parametrize(
    ("address", "size", "value", "error"),
    [
        (7, 1, 253, 4),  # ID 253: the emulator crashed encoding its status (exit 1)
        (8, 1, 9, 4),  # no such baud rate
        (11, 1, 2, 4),  # no Operating Mode 2
        (68, 1, 3, 4),  # Status Return Level is 0..2
        (112, 4, 40_000, 4),  # Profile Velocity is 0..32767
        (44, 4, 2000, 4),  # Velocity Limit is 0..1023
        (48, 4, 5000, 4),  # Max Position Limit is 0..4095
        (100, 2, 2000, 6),  # Goal PWM past PWM Limit (885)
        (102, 2, 3000, 6),  # Goal Current past Current Limit (1193)
    ],
)
def test_sdk_sees_a_value_out_of_range_refused_as_a_servo_refuses_it(
    sdk: tuple[PortHandler, PacketHandler], address: int, size: int, value: int, error: int
) -> None:
    port, handler = sdk
    write = {1: handler.write1ByteTxRx, 2: handler.write2ByteTxRx, 4: handler.write4ByteTxRx}
    read = {1: handler.read1ByteTxRx, 2: handler.read2ByteTxRx, 4: handler.read4ByteTxRx}
    before = read[size](port, 2, address)[0]
    assert write[size](port, 2, address, value) == (COMM_SUCCESS, error)
    assert read[size](port, 2, address) == (before, COMM_SUCCESS, 0)  # not applied
    assert handler.ping(port, 1)[1] == COMM_SUCCESS  # and the bus still answers


def test_a_servo_given_a_new_id_answers_at_it(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    port, handler = sdk
    assert handler.write1ByteTxRx(port, 2, 7, 2)[1] == COMM_SUCCESS  # its own: nothing changes
    handler.write1ByteTxRx(port, 1, 7, 5)
    assert handler.ping(port, 5)[1] == COMM_SUCCESS
    assert handler.ping(port, 1)[1] == COMM_RX_TIMEOUT
    # An ID another servo has: the emulator does not model two servos on one ID.
    assert handler.write1ByteTxRx(port, 5, 7, 2) == (COMM_SUCCESS, 4)
    assert sorted(emulator.servos) == [2, 5]
    # Broadcast: the first servo takes it, the next one is refused (one was dropped).
    handler.write1ByteTxOnly(port, 0xFE, 7, 9)
    eventually(lambda: sorted(s.id for s in emulator.servos.values()) == [2, 9] or
               sorted(s.id for s in emulator.servos.values()) == [5, 9])  # fmt: skip
    assert len(emulator.servos) == 2, emulator.servos


def test_an_alert_armed_for_an_instruction_strikes_once_it_ran(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator
) -> None:
    """An alert given an instruction waits for it (the official SDK's broadcast ACTION, to
    servo 1's goal): a move's motion begins, then the servo's error and its torque off."""
    port, handler = sdk
    handler.write1ByteTxRx(port, 1, 64, 1)
    emulator.inject(Fault("alert", id=1, value=0x04, instruction="action"))
    assert handler.read1ByteTxRx(port, 1, 70)[0] == 0  # armed: nothing yet
    assert handler.regWriteTxRx(port, 1, 116, 4, [0x00, 0x0A, 0x00, 0x00])[0] == COMM_SUCCESS
    assert handler.read1ByteTxRx(port, 1, 70)[0] == 0
    assert handler.action(port, 254) == COMM_SUCCESS
    assert handler.read1ByteTxRx(port, 1, 70)[0] == 0x04  # overheating, after the ACTION
    assert handler.read4ByteTxRx(port, 1, 116)[0] == 2560  # which applied its goal first
    assert handler.read1ByteTxRx(port, 1, 64)[0] == 0
    assert handler.read1ByteTxRx(port, 2, 70)[0] == 0  # the other servo is fine
    assert handler.reboot(port, 1)[0] == COMM_SUCCESS  # cleared; the alert struck once
    handler.regWriteTxRx(port, 1, 116, 4, [0x00, 0x08, 0x00, 0x00])
    assert handler.action(port, 254) == COMM_SUCCESS
    assert handler.read1ByteTxRx(port, 1, 70)[0] == 0


def test_journal_file_lists_every_executed_instruction(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    port, handler = sdk
    handler.ping(port, 1)
    handler.write1ByteTxRx(port, 2, 65, 1)
    emulator.inject(Fault("drop_status", instruction="write"))
    handler.write1ByteTxRx(port, 2, 65, 0)
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert len(lines) == len(emulator.journal) == 3
    assert [e.status for e in emulator.journal] == ["sent", "sent", "dropped"]
    assert emulator.snapshot(2)["led"] == 0  # the dropped-status write was applied


def test_every_journal_line_is_a_complete_frame_record(
    sdk: tuple[PortHandler, PacketHandler], emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    port, handler = sdk
    goal = (1500).to_bytes(4, "little")
    assert handler.regWriteTxRx(port, 1, 116, 4, list(goal))[:2] == (COMM_SUCCESS, 0)
    assert handler.action(port, 0xFE) == COMM_SUCCESS  # commits id 1; id 2 has nothing staged
    assert handler.read4ByteTxRx(port, 1, 116) == (1500, COMM_SUCCESS, 0)
    lines = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    # The file says exactly what the in-memory journal says: no line was written half done.
    assert lines == [asdict(e) for e in emulator.journal]
    reg, action_1, action_2, read = lines
    assert (reg["instruction"], reg["status"], reg["address"], reg["data"]) == (
        "reg_write",
        "sent",
        116,
        goal.hex(),
    )
    assert (action_1["id"], action_1["packet_id"], action_1["executed"]) == (1, 0xFE, True)
    assert (action_1["address"], action_1["data"]) == (116, goal.hex())  # what it committed
    assert (action_2["id"], action_2["executed"], action_2["error"]) == (2, False, 2)
    assert (action_2["address"], action_2["data"]) == (None, "")  # nothing was registered
    assert (read["address"], read["length"]) == (116, 4)
    for line in lines:
        packet = _core.dxl_decode_frame(bytes.fromhex(line["frame"]))
        assert packet.id == line["packet_id"]


def test_emulate_command_serves_a_pty_and_a_control_socket(tmp_path: Path) -> None:
    control = str(tmp_path / "ctl.sock")
    link = tmp_path / "ttyDXL"
    argv = ["emulate", "dynamixel", "--ids", "1,2", "--control", control, "--link", str(link)]
    with subprocess.Popen(
        [sys.executable, "-m", "tether", *argv], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            path = proc.stdout.readline().strip()
            assert path.startswith("/dev/pts/")
            eventually(lambda: Path(control).exists())
            assert str(link.resolve()) == path  # a stable name for a host configuration
            port = PortHandler(path)
            assert port.openPort()
            handler = PacketHandler(2.0)
            assert handler.ping(port, 2)[:2] == (1030, COMM_SUCCESS)
            control_request(control, {"op": "fault", "kind": "corrupt_crc", "instruction": "ping"})
            assert handler.ping(port, 1)[1] != COMM_SUCCESS
            port.closePort()
            journal = control_request(control, {"op": "journal"})
            assert [(e["id"], e["instruction"], e["status"]) for e in journal] == [
                (2, "ping", "sent"),
                (1, "ping", "corrupted"),
            ]
        finally:
            proc.terminate()
    assert proc.returncode == 0  # SIGTERM ends it as Ctrl-C does: its link and socket go
    assert not os.path.lexists(link) and not os.path.lexists(control)


def _refused(*argv: str) -> subprocess.CompletedProcess[str]:
    """`tether emulate dynamixel ARGV`, refused as a usage error without a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "tether", "emulate", "dynamixel", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "-5"],
        ["--model", "99999999"],
        ["--speed-scale", "0"],
        ["--speed-scale", "-1"],
        ["--speed-scale", "nan"],
        ["--link", "{tmp}/precious.txt"],
        ["--link", "{tmp}/no/such/dir/tty"],
        ["--control", "{tmp}/precious.txt"],
    ],
)
def test_emulate_refuses_bad_options_in_one_line_and_keeps_what_is_there(
    tmp_path: Path, argv: list[str]
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("kept\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = _refused(*argv)
    assert len(done.stderr.strip().splitlines()) == 1 and argv[0] in done.stderr, done.stderr
    assert precious.read_text() == "kept\n" and not precious.is_symlink()


def test_emulate_never_takes_a_live_socket_or_a_working_link(tmp_path: Path) -> None:
    """A `--control` path a live process serves (a daemon's socket, say) and a `--link` that
    already names a working device other than a pty (a udev name of real hardware) are
    refused; the live socket still answers its owner's clients."""
    from tether.devices.control import ControlServer, send_request

    live = str(tmp_path / "live.sock")
    server = ControlServer(live, {"ping": lambda r: "pong"})
    device = tmp_path / "ttyUSB0"
    device.write_text("")  # stands for the device node a udev link names
    link = tmp_path / "by-id"
    link.symlink_to(device)
    try:
        for argv in (["--control", live], ["--link", str(link)]):
            done = _refused(*argv)
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert send_request(live, {"op": "ping"}) == "pong"
        assert os.readlink(link) == str(device)
    finally:
        server.close()


def test_emulate_rejects_bad_ids() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "emulate", "dynamixel", "--ids", "1,1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "distinct" in done.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--ids", "1,,2"], "--ids wants a comma list of integers, got '1,,2'"),
        (["--link", ""], "--link is empty"),
        (["--control", ""], "--control is empty"),
        (["--journal", ""], "--journal is empty"),
        (["--journal", "/nonexistent-dir/j.jsonl"], "its directory does not exist"),
        (["--journal", "/"], "--journal /: Is a directory"),
        (["--control", "/tmp/" + "s" * 120], "a unix socket path is at most 107 bytes"),
    ],
    ids=["empty_id", "empty_link", "empty_control", "empty_journal", "no_dir", "a_dir", "long"],
)
def test_emulate_refuses_a_bad_path_or_id_as_usage(argv: list[str], said: str) -> None:
    """An empty path or id was taken silently; a socket path past the kernel's bound was an
    `OSError` and exit 1, a journal in a missing directory a `FileNotFoundError`: each is a
    usage error, exit 2, saying what is wrong, and no emulator starts."""
    done = subprocess.run(
        [sys.executable, "-m", "tether", "emulate", "dynamixel", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert said in done.stderr and "usage" in done.stderr, done.stderr
    assert done.stdout == ""  # no pty was served
