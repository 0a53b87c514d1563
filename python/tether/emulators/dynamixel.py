"""A DYNAMIXEL Protocol 2.0 bus emulator on a real pty: X-series servos that answer real packets.

`tether emulate dynamixel --ids 1,2` opens a pty in raw mode, prints its path and serves one
X-series control table per id. Present Position moves toward Goal Position over time at the
Profile Velocity (or the Velocity Limit when it is 0). Rules it follows from the e-manual:

- Status Return Level (68): 0 answers PING only, 1 PING and READ, 2 everything. Broadcast
  instructions other than PING and SYNC_READ get no status.
- REG_WRITE stages a write and sets Registered Instruction (69); ACTION applies it and clears 69;
  ACTION with nothing staged is an Instruction Error.
- A write is checked as the servo checks it: a value outside its item's range is a Data Range
  Error (`VALUE_RANGES`), a goal past its limit a Data Limit Error. A servo given a new ID
  answers at it; an ID another emulated servo has is refused (Data Range Error: the emulator
  does not model two servos colliding on one ID). Bulk instructions, FACTORY_RESET and CLEAR
  are not emulated (an Instruction Error).
- REBOOT wipes RAM (torque off, goals reset to present, staged write dropped, hardware error
  cleared); EEPROM stays. Writing EEPROM while torque is on is an Access Error.
- Present Velocity (128) is the shaft's speed over the last motion step (0 when still).
- A Hardware Error Status bit sets Alert (0x80) in every status; one Shutdown (63) enables
  (by default overheating, electrical shock, overload) turns torque off until a reboot.

Fault injection (Python API or the control socket): `drop_status` (apply the next matching
instruction but send no status), `corrupt_crc` (flip the CRC of the next status), `alert`
(raise hardware error bits), `noise` (garbage bytes before the next status), `delay` (a slow
device: the next matching instruction is answered `value` ms late, the bus busy meanwhile),
`refuse` (the next matching instruction is not applied and is answered with error number
`value`, as a servo refuses one: 6 is a Data Limit Error).

Journal: one entry per received frame and servo it addresses (memory, and JSON lines when
`--journal` is given), published only once that servo has handled the frame, so every line is
complete: `frame` (the whole instruction packet, hex), `packet_id` (the id it was sent to; 254 is
broadcast), `instruction`, `address`/`length`/`data` as decoded, `executed`, `error` and `status`
(`sent`, `dropped`, `corrupted`, `none`). An ACTION's `address`/`data` are the registered write it
committed on that servo; they are null/empty only when nothing was registered, and then the
ACTION is not `executed` (Instruction Error). A power cycle is an entry with `instruction`
`power_cycle` and no frame.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import signal
import stat
import sys
import threading
import time
import tty
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether import _core, _exit
from tether._args import Parser
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.host import ControlServer, send_request
from tether.errors import DxlFrameError, TetherError

BROADCAST = 0xFE
PRESENT_VELOCITY = tables.BY_NAME["present_velocity"]

# Status error numbers (e-manual "Error").
ERR_INSTRUCTION = 2
ERR_DATA_RANGE = 4
ERR_DATA_LENGTH = 5
ERR_DATA_LIMIT = 6
ERR_ACCESS = 7

#: The values each item takes (e-Manual, XM430-W350 control table): a write of another is a
#: Data Range Error, as the servo answers it. Goal PWM, Current and Velocity are checked against
#: their limits (a Data Limit Error) in `Servo.check_write`, Goal Position against the position
#: limits.
VALUE_RANGES: dict[str, tuple[int, int] | frozenset[int]] = {
    "id": (0, 252),
    "baud_rate": (0, 7),
    "return_delay_time": (0, 254),
    "drive_mode": (0, 15),
    "operating_mode": frozenset(tables.OPERATING_MODES),
    "protocol_type": frozenset({1, 2}),
    "homing_offset": (-1_044_479, 1_044_479),
    "moving_threshold": (0, 1023),
    "temperature_limit": (0, 100),
    "max_voltage_limit": (60, 160),
    "min_voltage_limit": (60, 160),
    "pwm_limit": (0, 885),
    "current_limit": (0, 1193),
    "velocity_limit": (0, 1023),
    "max_position_limit": (0, 4095),
    "min_position_limit": (0, 4095),
    "startup_configuration": (0, 3),
    "torque_enable": (0, 1),
    "led": (0, 1),
    "status_return_level": (0, 2),
    "bus_watchdog": (0, 127),
    "profile_acceleration": (0, 32767),
    "profile_velocity": (0, 32767),
}
#: A goal item, and the limit item it may not pass either way (a Data Limit Error).
GOAL_LIMITS = {
    "goal_pwm": "pwm_limit",
    "goal_current": "current_limit",
    "goal_velocity": "velocity_limit",
}

FAULT_KINDS = ("drop_status", "corrupt_crc", "alert", "noise", "delay", "refuse")


@dataclass
class Fault:
    """One armed fault; `instruction` (a name such as "write") narrows what it applies to."""

    kind: str
    count: int = 1
    instruction: str | None = None
    id: int | None = None
    value: int = 0


class Servo:
    """One emulated X-series device: a control table, a staged REG_WRITE, simple kinematics."""

    def __init__(self, dxl_id: int, model: int = 1030) -> None:
        self.table = bytearray(tables.TABLE_SIZE)
        for f in tables.FIELDS:
            self.table[f.address : f.end] = tables.encode(f, f.initial)
        self.set(tables.BY_NAME["id"], dxl_id)
        self.set(tables.MODEL_NUMBER, model)
        self.staged: tuple[int, bytes] | None = None
        self._position = float(tables.CENTER_TICK)

    @property
    def id(self) -> int:
        return self.get(tables.BY_NAME["id"])

    def get(self, f: tables.Field) -> int:
        return tables.decode(f, bytes(self.table[f.address : f.end]))

    def set(self, f: tables.Field, value: int) -> None:
        self.table[f.address : f.end] = tables.encode(f, value)

    def reboot(self) -> None:
        """Wipe RAM to initial values; the shaft (present position) stays where it is."""
        present = self.get(tables.PRESENT_POSITION)
        for f in tables.FIELDS:
            if not f.eeprom:
                self.table[f.address : f.end] = tables.encode(f, f.initial)
        self.set(tables.PRESENT_POSITION, present)
        self.set(tables.GOAL_POSITION, present)
        self.staged = None

    def error_alert(self) -> int:
        return 0x80 if self.get(tables.HARDWARE_ERROR_STATUS) else 0

    def read(self, address: int, length: int) -> tuple[int, bytes]:
        if length == 0 or address + length > len(self.table):
            return ERR_ACCESS, b""
        return 0, bytes(self.table[address : address + length])

    def check_write(self, address: int, data: bytes) -> int:
        """Error number a write would get (0 = accepted), without applying it."""
        end = address + len(data)
        covered = address
        torque_on = self.get(tables.TORQUE_ENABLE) == 1
        for f in tables.FIELDS:
            if f.end <= address or f.address >= end:
                continue
            if f.address < address or f.end > end:
                return ERR_DATA_LENGTH
            if f.address != covered:
                return ERR_ACCESS  # a gap: an undefined address
            covered = f.end
            if not f.writable or (f.eeprom and torque_on):
                return ERR_ACCESS
            value = tables.decode(f, data[f.address - address : f.end - address])
            allowed = VALUE_RANGES.get(f.name)
            if isinstance(allowed, tuple) and not allowed[0] <= value <= allowed[1]:
                return ERR_DATA_RANGE
            if isinstance(allowed, frozenset) and value not in allowed:
                return ERR_DATA_RANGE
            limit = GOAL_LIMITS.get(f.name)
            if limit is not None and abs(value) > self.get(tables.BY_NAME[limit]):
                return ERR_DATA_LIMIT
            if f is tables.GOAL_POSITION and not (
                self.get(tables.MIN_POSITION_LIMIT) <= value <= self.get(tables.MAX_POSITION_LIMIT)
            ):
                return ERR_DATA_LIMIT
        return 0 if covered == end else ERR_ACCESS

    def shut_down(self) -> bool:
        """Whether a hardware error it shuts down on is set (Hardware Error Status bits that
        Shutdown (63) enables: torque stays off until a reboot)."""
        return bool(self.get(tables.HARDWARE_ERROR_STATUS) & self.get(tables.BY_NAME["shutdown"]))

    def apply_write(self, address: int, data: bytes) -> None:
        self.table[address : address + len(data)] = data
        if self.shut_down():
            self.set(tables.TORQUE_ENABLE, 0)

    def step(self, dt: float, speed_scale: float) -> None:
        goal = self.get(tables.GOAL_POSITION)
        if self.get(tables.TORQUE_ENABLE) != 1:
            self.set(tables.MOVING, 0)
            self.set(PRESENT_VELOCITY, 0)
            return
        velocity = self.get(tables.PROFILE_VELOCITY) or self.get(tables.VELOCITY_LIMIT)
        max_step = tables.ticks_per_second(velocity) * dt * speed_scale
        delta = goal - self._position
        before = self._position
        if abs(delta) <= max_step:
            self._position = float(goal)
        else:
            self._position += max_step if delta > 0 else -max_step
        self.set(tables.PRESENT_POSITION, round(self._position))
        self.set(tables.MOVING, 0 if round(self._position) == goal else 1)
        # Present Velocity: the shaft's measured speed over this step, in the register's unit.
        speed = (self._position - before) / dt if dt > 0 else 0.0
        self.set(PRESENT_VELOCITY, round(speed / tables.ticks_per_second(1)))

    def sync_position(self) -> None:
        self._position = float(self.get(tables.PRESENT_POSITION))


@dataclass
class JournalEntry:
    seq: int
    t_ms: float
    id: int
    instruction: str
    address: int | None = None
    data: str = ""
    ids: list[int] = field(default_factory=list)
    executed: bool = True
    status: str = "none"  # "sent", "dropped", "corrupted", "none"
    error: int = 0
    packet_id: int | None = None
    length: int | None = None
    frame: str = ""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


class DynamixelEmulator:
    """A bus of emulated servos behind one pty. Single owner: drive it with `serve` (a thread)."""

    def __init__(
        self,
        ids: Sequence[int],
        *,
        model: int = 1030,
        journal_path: str | os.PathLike[str] | None = None,
        speed_scale: float = 1.0,
    ) -> None:
        if not ids or len(set(ids)) != len(ids) or not all(0 <= i <= 252 for i in ids):
            raise ValueError(f"ids must be distinct and in 0..252, got {list(ids)}")
        self.servos = {i: Servo(i, model) for i in ids}
        self.speed_scale = speed_scale
        self.journal: list[JournalEntry] = []
        self._journal_file = open(journal_path, "a", encoding="utf-8") if journal_path else None
        self._faults: list[Fault] = []
        self._lock = threading.RLock()
        self._decoder = _core.DxlDecoder()
        self._t0 = time.monotonic()
        self._last_step = self._t0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frame_errors = 0
        master, slave = os.openpty()
        tty.setraw(slave)
        self._master, self._slave = master, slave
        # The slave stays open here so the master never sees EIO between client sessions.
        self.path = os.ttyname(slave)

    # --- faults and state (thread-safe) ---

    def inject(self, fault: Fault) -> None:
        if fault.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {fault.kind!r}; one of {FAULT_KINDS}")
        if fault.kind == "refuse" and not 1 <= fault.value <= 0x7F:
            raise ValueError(f"a refusal's value is an error number 1..127, not {fault.value}")
        with self._lock:
            if fault.kind == "alert" and fault.instruction is None:
                self._alert(fault)  # now
                return
            self._faults.append(fault)  # an alert with an instruction: once that one arrives

    def clear_faults(self) -> None:
        """Disarm every fault not yet taken (the device behaves again)."""
        with self._lock:
            self._faults.clear()

    def _alert(self, fault: Fault) -> None:
        """A hardware error (`fault.value`, overheating by default) on `fault.id`, or every
        servo: its Hardware Error Status set, and its torque off when Shutdown (63) enables
        that error (by default overheating, electrical shock and overload, not input voltage),
        as the device does."""
        targets = [fault.id] if fault.id is not None else list(self.servos)
        for i in targets:
            servo = self.servos[i]
            servo.set(tables.HARDWARE_ERROR_STATUS, fault.value or 0x04)
            if servo.shut_down():
                servo.set(tables.TORQUE_ENABLE, 0)

    def snapshot(self, dxl_id: int) -> dict[str, int]:
        with self._lock:
            servo = self.servos[dxl_id]
            return {f.name: servo.get(f) for f in tables.FIELDS}

    def set_present(self, dxl_id: int, ticks: int) -> None:
        """Move a shaft by hand (torque off), as a person or gravity would."""
        with self._lock:
            servo = self.servos[dxl_id]
            servo.set(tables.PRESENT_POSITION, ticks)
            servo.sync_position()

    def power_cycle(self) -> None:
        """Power loss: every servo reboots (RAM wiped) without any instruction."""
        with self._lock:
            for servo in self.servos.values():
                servo.reboot()
            self._publish(self._record(BROADCAST, "power_cycle", status="none"))

    def _take_fault(self, kind: str, instruction: str, dxl_id: int | None) -> Fault | None:
        """The first armed fault of `kind` for `instruction` to `dxl_id` (None: any id),
        counted down."""
        for fault in self._faults:
            if fault.kind != kind:
                continue
            if fault.instruction is not None and fault.instruction != instruction:
                continue
            if dxl_id is not None and fault.id is not None and fault.id != dxl_id:
                continue
            fault.count -= 1
            if fault.count <= 0:
                self._faults.remove(fault)
            return fault
        return None

    def _record(self, dxl_id: int, instruction: str, **kw: Any) -> JournalEntry:
        """A new entry, stamped now; `_publish` it once the frame is handled."""
        return JournalEntry(
            -1,
            round((time.monotonic() - self._t0) * 1000, 3),
            dxl_id,
            instruction,
            **kw,
        )

    def _publish(self, entry: JournalEntry) -> None:
        """Append a complete entry: readers (and the file) never see one half filled in."""
        entry.seq = len(self.journal)
        self.journal.append(entry)
        if self._journal_file is not None:
            self._journal_file.write(entry.to_json() + "\n")
            self._journal_file.flush()

    # --- the wire ---

    def handle_bytes(self, data: bytes) -> bytes:
        """Feed received bytes; return everything to send back."""
        out = bytearray()
        with self._lock:
            self._decoder.feed(data)
            while True:
                try:
                    packet = self._decoder.next_packet()
                except DxlFrameError:
                    self.frame_errors += 1
                    continue
                if packet is None:
                    break
                if packet.is_status:
                    continue  # another device's answer on a shared line
                out += self._execute(packet)
        return bytes(out)

    def _status(
        self, servo: Servo, error: int, data: bytes, entry: JournalEntry, instruction: str
    ) -> bytes:
        frame = _core.dxl_encode_status(servo.id, error | servo.error_alert(), data)
        entry.error = error
        if self._take_fault("drop_status", instruction, servo.id):
            entry.status = "dropped"
            return b""
        if self._take_fault("corrupt_crc", instruction, servo.id):
            entry.status = "corrupted"
            frame = frame[:-1] + bytes([frame[-1] ^ 0xFF])
        else:
            entry.status = "sent"
        noise = self._take_fault("noise", instruction, servo.id)
        return (bytes([0xFF, 0x00, 0xFF, 0xFF, 0x13]) if noise else b"") + frame

    def _answers(self, servo: Servo, instruction: str) -> bool:
        level = servo.get(tables.STATUS_RETURN_LEVEL)
        if instruction == "ping":
            return True
        if instruction in ("read", "sync_read"):
            return level >= 1
        return level >= 2

    def _execute(self, packet: _core.DxlPacket) -> bytes:
        try:
            cmd = packet.command()
        except DxlFrameError:
            self.frame_errors += 1
            return b""
        name = cmd.name
        delay = self._take_fault("delay", name, packet.id)
        if delay is not None:
            time.sleep(delay.value / 1000)
        # An alert armed for this instruction strikes once it ran (an ACTION's motion began),
        # whatever the packet's id: its own `id` names the servo it hits.
        alert = self._take_fault("alert", name, None)
        try:
            return self._execute_packet(packet, cmd, name)
        finally:
            if alert is not None:
                self._alert(alert)
            if any(dxl_id != servo.id for dxl_id, servo in self.servos.items()):
                # A servo given a new ID answers at it from the next frame on.
                self.servos = {servo.id: servo for servo in self.servos.values()}

    def _execute_packet(self, packet: _core.DxlPacket, cmd: _core.DxlCommand, name: str) -> bytes:
        frame = _core.dxl_encode(packet.id, packet.instruction, packet.params).hex()
        if name == "sync_read" or name == "sync_write":
            return self._execute_sync(packet.id, cmd, frame)
        targets = (
            list(self.servos.values())
            if packet.id == BROADCAST
            else [self.servos[packet.id]]
            if packet.id in self.servos
            else []
        )
        out = bytearray()
        for servo in targets:
            entry = self._record(
                servo.id,
                name,
                address=cmd.address,
                length=cmd.length,
                data=cmd.data.hex(),
                packet_id=packet.id,
                frame=frame,
            )
            # The level in force when the instruction arrived decides (a write may change it).
            answers = self._answers(servo, name) and (packet.id != BROADCAST or name == "ping")
            if name == "action" and servo.staged is not None:
                # The journal shows what an ACTION applied, so duplicates can be told apart.
                entry.address, entry.data = servo.staged[0], servo.staged[1].hex()
            refusal = self._take_fault("refuse", name, servo.id)
            if refusal is not None:
                error, data = refusal.value & 0x7F, b""  # not applied
            else:
                error, data = self._run(servo, cmd)
            entry.executed = error == 0
            if answers:
                out += self._status(servo, error, data, entry, name)
            else:
                entry.error = error
            if name == "reboot" and error == 0:
                servo.reboot()
            self._publish(entry)
        return bytes(out)

    def _run(self, servo: Servo, cmd: _core.DxlCommand) -> tuple[int, bytes]:
        name = cmd.name
        if name == "ping":
            return 0, tables.encode(tables.MODEL_NUMBER, servo.get(tables.MODEL_NUMBER)) + bytes(
                [servo.get(tables.FIRMWARE_VERSION)]
            )
        if name == "read":
            return servo.read(cmd.address or 0, cmd.length or 0)
        if name in ("write", "reg_write"):
            error = servo.check_write(cmd.address or 0, cmd.data)
            if error:
                return error, b""
            field = tables.BY_NAME["id"]
            start = cmd.address or 0
            if start <= field.address < start + len(cmd.data):
                new_id = cmd.data[field.address - start]
                others = {s.id for s in self.servos.values() if s is not servo}
                if new_id != servo.id and new_id in others:  # a broadcast's earlier servo too
                    # Two servos on one ID collide on a real bus; the emulator does not model
                    # that, so it refuses the write instead.
                    return ERR_DATA_RANGE, b""
            if name == "write":
                servo.apply_write(cmd.address or 0, cmd.data)
            else:
                servo.staged = (cmd.address or 0, cmd.data)
                servo.set(tables.REGISTERED_INSTRUCTION, 1)
            return 0, b""
        if name == "action":
            if servo.staged is None:
                return ERR_INSTRUCTION, b""
            address, data = servo.staged
            servo.staged = None
            servo.set(tables.REGISTERED_INSTRUCTION, 0)
            servo.apply_write(address, data)
            return 0, b""
        if name == "reboot":
            return 0, b""
        return ERR_INSTRUCTION, b""

    def _execute_sync(self, packet_id: int, cmd: _core.DxlCommand, frame: str) -> bytes:
        if packet_id != BROADCAST:
            return b""
        out = bytearray()
        if cmd.name == "sync_read":
            for dxl_id in cmd.ids:
                servo = self.servos.get(dxl_id)
                if servo is None:
                    continue
                entry = self._record(
                    dxl_id,
                    "sync_read",
                    address=cmd.address,
                    length=cmd.length,
                    ids=list(cmd.ids),
                    packet_id=packet_id,
                    frame=frame,
                )
                error, data = servo.read(cmd.address or 0, cmd.length or 0)
                entry.executed = error == 0
                if self._answers(servo, "sync_read"):
                    out += self._status(servo, error, data, entry, "sync_read")
                else:
                    entry.error = error
                self._publish(entry)
            return bytes(out)
        for dxl_id, data in cmd.entries:
            servo = self.servos.get(dxl_id)
            if servo is None:
                continue
            entry = self._record(
                dxl_id,
                "sync_write",
                address=cmd.address,
                length=cmd.length,
                data=data.hex(),
                ids=list(cmd.ids),
                packet_id=packet_id,
                frame=frame,
            )
            error = servo.check_write(cmd.address or 0, data)
            entry.error, entry.executed = error, error == 0
            if not error:
                servo.apply_write(cmd.address or 0, data)
            self._publish(entry)
        return b""

    def step(self) -> None:
        now = time.monotonic()
        with self._lock:
            dt, self._last_step = now - self._last_step, now
            for servo in self.servos.values():
                servo.step(dt, self.speed_scale)

    # --- serving ---

    def serve(self) -> None:
        """Answer packets until `stop()`; moves the servos between packets."""
        while not self._stop.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.005)
            self.step()
            if not ready:
                continue
            try:
                data = os.read(self._master, 4096)
            except OSError:
                time.sleep(0.005)
                continue
            reply = self.handle_bytes(data)
            if reply:
                os.write(self._master, reply)

    def start(self) -> DynamixelEmulator:
        self._thread = threading.Thread(target=self.serve, name="dxl-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._journal_file is not None:
            self._journal_file.close()
            self._journal_file = None

    def __enter__(self) -> DynamixelEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def control_server(emulator: DynamixelEmulator, path: str) -> ControlServer:
    """Out-of-process control of an emulator: one JSON request per connection on a unix socket
    (the same server the owning host uses for its own control requests).

    Requests: {"op": "fault", "kind": ..., "count", "instruction", "id", "value"} (an
    "alert" strikes now, or, given an "instruction", once that one ran: "action" for a move's
    motion),
    {"op": "journal"}, {"op": "snapshot", "id": n}, {"op": "set_present", "id", "ticks"},
    {"op": "power_cycle"}.
    """
    handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
        "fault": lambda r: emulator.inject(
            Fault(
                r["kind"],
                int(r.get("count", 1)),
                r.get("instruction"),
                r.get("id"),
                int(r.get("value", 0)),
            )
        ),
        "journal": lambda r: [e.__dict__ for e in emulator.journal],
        "snapshot": lambda r: emulator.snapshot(int(r["id"])),
        "set_present": lambda r: emulator.set_present(int(r["id"]), int(r["ticks"])),
        "power_cycle": lambda r: emulator.power_cycle(),
    }
    return ControlServer(path, handlers)


def control_request(path: str, request: dict[str, Any], timeout: float = 5.0) -> Any:
    """Send one request to an emulator's control socket and return its result."""
    return send_request(path, request, timeout=timeout)


def parse_ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]  # an empty item ("1,,2") is refused
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--ids wants a comma list of integers, got {text!r}"
        ) from None


def parse_model(text: str) -> int:
    try:
        model = int(text)
    except ValueError:
        model = -1
    if not 0 <= model <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"--model wants a model number 0..65535, got {text!r}")
    return model


def parse_speed_scale(text: str) -> float:
    try:
        scale = float(text)
    except ValueError:
        scale = math.nan
    if not 0 < scale <= 1000:
        raise argparse.ArgumentTypeError(
            f"--speed-scale wants a number above 0 and at most 1000, got {text!r}"
        )
    return scale


#: The longest unix socket path the kernel takes (`sun_path` holds 108 bytes with its NUL).
SOCKET_PATH_MAX = 107


def _check_new_path(parser: Parser, option: str, path: Path, *, replaceable: int) -> None:
    """Refuse (usage) an `option` path whose directory is missing, or where something other
    than a stale `replaceable` (a `stat` file type: a link, a socket) already is: the emulator
    never removes a file or a device node that is not its own kind."""
    if not path.parent.is_dir():
        parser.error(f"{option} {path}: its directory {path.parent} does not exist")
    if os.path.lexists(path) and stat.S_IFMT(os.lstat(path).st_mode) != replaceable:
        parser.error(f"{option} {path}: something else is there; give another path")
    if replaceable == stat.S_IFLNK and path.is_symlink():
        target = os.readlink(path)
        if os.path.exists(path) and not target.startswith("/dev/pts/"):
            # A working link to something else (a udev name of real hardware, say).
            parser.error(
                f"{option} {path}: it links to {target}, not a stale pty; give another path"
            )


def main(argv: list[str]) -> int:
    parser = Parser(
        prog="tether emulate dynamixel",
        description=__doc__.splitlines()[0] + " Prints the pty's path, then serves until Ctrl-C.",
        epilog="exit codes: 0 stopped (Ctrl-C); 2 usage (see `tether --help`).",
    )
    parser.add_argument("--ids", type=parse_ids, default=[1], help="servo ids, e.g. 1,2")
    parser.add_argument(
        "--model", type=parse_model, default=1030, help="PING model number (1030 = XM430-W210)"
    )
    parser.add_argument(
        "--journal",
        help="append every executed instruction to this JSON-lines file (default: none)",
    )
    parser.add_argument(
        "--control",
        help="unix socket path for fault injection and journal queries (default: none)",
    )
    parser.add_argument(
        "--speed-scale",
        type=parse_speed_scale,
        default=1.0,
        help="multiply every motion speed (above 0, at most 1000)",
    )
    parser.add_argument(
        "--link",
        help="also create a symlink to the pty at this path, removed on exit (default: none;"
        " a stale link there is replaced, anything else refused)",
    )
    args = parser.parse_args(argv)
    for option in ("link", "control", "journal"):
        if getattr(args, option) == "":  # an unset shell variable: never "no such option"
            parser.error(f"--{option} is empty: give a path, or leave the option out")
    link = Path(args.link) if args.link else None
    if link is not None:
        _check_new_path(parser, "--link", link, replaceable=stat.S_IFLNK)
    if args.control:
        _check_new_path(parser, "--control", Path(args.control), replaceable=stat.S_IFSOCK)
        if len(os.fsencode(args.control)) > SOCKET_PATH_MAX:
            parser.error(
                f"--control {args.control}: a unix socket path is at most {SOCKET_PATH_MAX}"
                " bytes; give a shorter one"
            )
    if args.journal and not Path(args.journal).parent.is_dir():
        parser.error(f"--journal {args.journal}: its directory does not exist")
    try:
        emulator = DynamixelEmulator(
            args.ids, model=args.model, journal_path=args.journal, speed_scale=args.speed_scale
        )
    except ValueError as exc:
        parser.error(str(exc))
    except OSError as exc:  # the journal cannot be opened (a directory, no permission)
        parser.error(f"--journal {args.journal}: {exc.strerror or exc}")
    try:
        control = control_server(emulator, args.control) if args.control else None
    except TetherError as exc:  # a live socket there (a daemon's, say): never taken over
        emulator.stop()
        parser.error(f"--control {args.control}: {exc}")
    if link is not None:
        link.unlink(missing_ok=True)  # a stale link (checked above)
        link.symlink_to(emulator.path)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM ends it as Ctrl-C does: its link and socket go

    signal.signal(signal.SIGTERM, on_term)
    print(emulator.path, flush=True)
    try:
        emulator.serve()
    except KeyboardInterrupt:
        pass
    finally:
        if control is not None:
            control.close()
        if link is not None and os.path.islink(link) and os.readlink(link) == emulator.path:
            link.unlink()
        emulator.stop()
    return _exit.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
