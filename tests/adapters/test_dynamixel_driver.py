"""The serial driver against the pty emulator: retries only for reads, unconfirmed writes,
typed device errors, identity checks at connect and exclusive ownership."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig, parse_config
from tether.adapters.dynamixel.driver import (
    DxlBus,
    check_robot,
    is_locked,
    lock_path,
    read_owner,
    resolve_port,
)
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.errors import (
    DeviceError,
    DeviceIdentityError,
    DeviceSetupError,
    PortBusy,
    TransportTimeout,
    WriteUnconfirmed,
)


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator([1, 2], speed_scale=20.0) as emu:
        yield emu


@pytest.fixture
def bus(emulator: DynamixelEmulator, tmp_path: Path) -> Iterator[DxlBus]:
    with DxlBus.open(emulator.path, timeout_ms=400, lock_dir=tmp_path / "locks") as b:
        yield b


def code(exc: pytest.ExceptionInfo[Exception]) -> str:
    return str(getattr(exc.value, "code", ""))


def robot_config(path: str, *, model: int = 1030) -> HostConfig:
    text = f"""
[ports.bus]
url = "{path}"
[robots.arm]
port = "bus"
[[robots.arm.joints]]
name = "a"
id = 1
min = -1
max = 1
model = {model}
[[robots.arm.joints]]
name = "b"
id = 2
min = -1
max = 1
"""
    return parse_config(text)


def test_ping_read_write_round_trip(bus: DxlBus, emulator: DynamixelEmulator) -> None:
    servo = bus.ping(2)
    assert (servo.model, servo.firmware) == (1030, 45)
    bus.write_field(1, tables.TORQUE_ENABLE, 1)
    bus.write_field(1, tables.GOAL_POSITION, 3000)
    assert bus.read_field(1, tables.GOAL_POSITION) == 3000
    assert bus.sync_read_field(tables.TORQUE_ENABLE, [1, 2]) == {1: 1, 2: 0}
    assert [r.instruction for r in bus.sent][:2] == ["ping", "write"]
    assert len(bus.sent[0].digest) == 64


def test_a_corrupt_read_is_retried(bus: DxlBus, emulator: DynamixelEmulator) -> None:
    emulator.inject(Fault("corrupt_crc", instruction="read"))
    assert bus.read_field(1, tables.PRESENT_POSITION) == 2048
    assert bus.stats.read_retries == 1 and bus.stats.frame_errors == 1
    assert [e.instruction for e in emulator.journal] == ["read", "read"]


def test_reads_give_up_after_the_retry_budget(bus: DxlBus, emulator: DynamixelEmulator) -> None:
    emulator.inject(Fault("drop_status", count=3, instruction="read"))
    with pytest.raises(TransportTimeout):
        bus.read_field(1, tables.PRESENT_POSITION)
    assert len(emulator.journal) == 3  # 1 try + 2 retries, then a clear error


def test_a_write_whose_status_is_lost_is_never_resent(
    bus: DxlBus, emulator: DynamixelEmulator
) -> None:
    emulator.inject(Fault("drop_status", instruction="write"))
    with pytest.raises(WriteUnconfirmed) as info:
        bus.write_field(2, tables.GOAL_POSITION, 1000)
    assert code(info) == "write_unconfirmed"
    writes = [e for e in emulator.journal if e.instruction == "write"]
    assert len(writes) == 1 and writes[0].status == "dropped"
    assert emulator.snapshot(2)["goal_position"] == 1000  # applied, though unconfirmed


def test_a_corrupt_write_status_is_unconfirmed(bus: DxlBus, emulator: DynamixelEmulator) -> None:
    emulator.inject(Fault("corrupt_crc", instruction="reg_write"))
    with pytest.raises(WriteUnconfirmed):
        bus.reg_write(1, tables.GOAL_POSITION.address, tables.encode(tables.GOAL_POSITION, 1500))
    assert bus.read_field(1, tables.REGISTERED_INSTRUCTION) == 1


def test_noise_before_a_status_is_skipped(bus: DxlBus, emulator: DynamixelEmulator) -> None:
    emulator.inject(Fault("noise", instruction="ping"))
    assert bus.ping(1).model == 1030
    assert bus.stats.read_retries == 0


def test_device_errors_are_typed(bus: DxlBus) -> None:
    with pytest.raises(DeviceError) as info:
        bus.write_field(1, tables.PRESENT_POSITION, 1)
    assert code(info) == "access"
    with pytest.raises(DeviceError) as info:
        bus.write_field(1, tables.GOAL_POSITION, 9999)
    assert code(info) == "data_limit"


def test_alert_bit_is_tracked(bus: DxlBus, emulator: DynamixelEmulator) -> None:
    emulator.inject(Fault("alert", id=2, value=0x04))
    assert bus.read_field(2, tables.HARDWARE_ERROR_STATUS) == 0x04
    assert bus.stats.alerts == {2}
    assert bus.last_status[2][0] == 0x80


def test_reboot_needs_an_operator_and_wipes_ram(bus: DxlBus, emulator: DynamixelEmulator) -> None:
    bus.write_field(1, tables.TORQUE_ENABLE, 1)
    with pytest.raises(DeviceIdentityError):
        bus.reboot(1, operator="")
    assert emulator.snapshot(1)["torque_enable"] == 1
    bus.reboot(1, operator="alice")
    assert bus.read_field(1, tables.TORQUE_ENABLE) == 0


def test_check_robot_reads_identity_and_status_level(
    bus: DxlBus, emulator: DynamixelEmulator
) -> None:
    arm = robot_config(emulator.path).robot("arm")
    identity = check_robot(bus, arm)
    assert identity.servos == ((1, 1030, 45), (2, 1030, 45))
    assert identity.as_dict()["port_key"].startswith("path:/dev/pts/")
    with pytest.raises(DeviceIdentityError) as info:
        check_robot(bus, robot_config(emulator.path, model=1060).robot("arm"))
    assert code(info) == "model_mismatch"
    bus.write_field(2, tables.STATUS_RETURN_LEVEL, 1)
    with pytest.raises(DeviceIdentityError) as info:
        check_robot(bus, arm)
    assert code(info) == "status_return_level"
    emulator.servos[2].set(tables.STATUS_RETURN_LEVEL, 0)  # PING only: READ goes unanswered
    with pytest.raises(DeviceIdentityError) as info:
        check_robot(bus, arm)
    assert code(info) == "status_return_level"


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [
        (tables.OPERATING_MODE, 1, "operating_mode"),  # velocity: Goal Position is ignored
        (tables.OPERATING_MODE, 4, "operating_mode"),  # extended: multi-turn, no limits
        (tables.DRIVE_MODE, 4, "drive_mode"),  # time-based: Profile Velocity is a duration
        (tables.DRIVE_MODE, 8, "drive_mode"),  # torque on by goal update
        (tables.MIN_POSITION_LIMIT, 1500, "servo_limits"),  # -0.84 rad: inside the -1 rad
        (tables.MAX_POSITION_LIMIT, 2600, "servo_limits"),  # +0.85 rad: inside the +1 rad
    ],
)
def test_check_robot_refuses_a_servo_set_up_for_other_moves(
    bus: DxlBus, emulator: DynamixelEmulator, field: tables.Field, value: int, wanted: str
) -> None:
    """A servo whose Operating Mode, Drive Mode or own position limits would make Tether's
    moves do something else than host.toml says is refused at connect (`DeviceSetupError`,
    a `DeviceIdentityError`); its settings are read, never changed. Drive Mode's reverse bit
    changes only the direction, so it is accepted."""
    arm = robot_config(emulator.path).robot("arm")
    bus.write_field(2, field, value)  # EEPROM: the servos' torque is off
    with pytest.raises(DeviceSetupError) as info:
        check_robot(bus, arm)
    assert code(info) == wanted and "id 2" in str(info.value), info.value
    assert isinstance(info.value, DeviceIdentityError)
    assert bus.read_field(2, field) == value
    bus.write_field(2, field, field.initial)
    bus.write_field(2, tables.DRIVE_MODE, 1)  # reverse direction
    check_robot(bus, arm)


def test_one_process_owns_a_port(emulator: DynamixelEmulator, tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    with DxlBus.open(emulator.path, lock_dir=locks, socket_path="/tmp/owner.sock") as first:
        path = lock_path(locks, first.identity.key)
        assert is_locked(path)
        assert read_owner(path)["socket"] == "/tmp/owner.sock"
        with pytest.raises(PortBusy) as info:
            DxlBus.open(emulator.path, lock_dir=locks)
        assert code(info) == "port_owned"
        # Without the identity lock, the exclusive open still refuses a second owner.
        with pytest.raises(PortBusy):
            DxlBus.open(emulator.path, lock_dir=None)
    assert not is_locked(path)
    DxlBus.open(emulator.path, lock_dir=locks).close()


def test_pyserial_urls_are_accepted(tmp_path: Path) -> None:
    with DxlBus.open("loop://", timeout_ms=20, read_retries=0, lock_dir=tmp_path) as bus:
        assert bus.identity.key == "url:loop://"
        # A loopback echoes our own instruction packet: no status, so a bounded timeout.
        with pytest.raises(TransportTimeout):
            bus.ping(1)


def test_usb_identity_must_match_exactly_one_adapter() -> None:
    cfg = parse_config(
        """
[ports.bus]
usb_serial = "NO-SUCH-SERIAL-123"
vid_pid = "0403:6014"
[robots.arm]
port = "bus"
[[robots.arm.joints]]
name = "a"
id = 1
min = -1
max = 1
"""
    ).ports["bus"]
    with pytest.raises(DeviceIdentityError) as info:
        resolve_port(cfg)
    assert code(info) == "adapter_not_found"


def test_a_thread_with_the_priority_goes_first_on_the_bus(
    bus: DxlBus, emulator: DynamixelEmulator
) -> None:
    """While a stop holds the bus's priority, another thread's next exchange waits until it
    ends: the stop's second read is on the wire before the other thread's read."""
    waiting = threading.Event()
    other: list[int] = []

    def read() -> None:
        waiting.set()
        other.append(bus.read_field(2, tables.PRESENT_POSITION))

    with bus.priority():
        bus.read_field(1, tables.PRESENT_POSITION)
        thread = threading.Thread(target=read)
        thread.start()
        waiting.wait(5)
        thread.join(0.3)  # free to run: only the priority holds it back
        assert thread.is_alive() and other == []
        bus.read_field(1, tables.GOAL_POSITION)  # the holder's exchanges still go through
        with bus.priority():  # re-entrant for the holder
            bus.read_field(1, tables.TORQUE_ENABLE)
    thread.join(5)
    assert not thread.is_alive() and len(other) == 1
    reads = [(e.instruction, e.id, e.address) for e in emulator.journal if e.instruction == "read"]
    assert reads[-4:] == [
        ("read", 1, tables.PRESENT_POSITION.address),
        ("read", 1, tables.GOAL_POSITION.address),
        ("read", 1, tables.TORQUE_ENABLE.address),
        ("read", 2, tables.PRESENT_POSITION.address),
    ]


def test_a_reply_deadline_counts_the_frames_still_on_the_wire(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    """A SYNC_WRITE is answered by no status, and its frame is not drained before the bus goes
    on: the next exchange's reply cannot start before both frames have left the wire, so its
    deadline counts them at the port's baud rate (here 9600: the 24-byte SYNC_WRITE and the
    10-byte PING, 35 ms) before its 5 ms timeout. A device that answers 25 ms late, as it
    would behind such a line, is answered, not timed out."""
    goal = tables.GOAL_POSITION
    entries = [(i, tables.encode(goal, 2048)) for i in (1, 2)]
    with DxlBus.open(
        emulator.path, baudrate=9600, timeout_ms=5, read_retries=0, lock_dir=tmp_path
    ) as slow:
        emulator.inject(Fault("delay", instruction="ping", value=25))
        slow.sync_write(goal.address, goal.size, entries)
        assert slow.ping(1).id == 1
        # Nothing queued any more: a late answer past the PING's own time and timeout is not.
        emulator.inject(Fault("delay", instruction="ping", value=60))
        with pytest.raises(TransportTimeout):
            slow.ping(1)
