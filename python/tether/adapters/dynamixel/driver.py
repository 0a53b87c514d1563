"""The DYNAMIXEL serial driver: the only code that opens a port.

Transport rules:
- `serial.Serial` on a path or a pyserial URL (`serial_for_url`), opened exclusively, with a
  bounded timeout on every read; no call waits longer than about twice `timeout_ms`.
- Reads (PING, READ, SYNC_READ) may be retried: they change nothing on the device. A write is
  sent once: a missing status raises `WriteUnconfirmed` (it may or may not have applied),
  never a silent resend. A status with an error number raises `DeviceError` (not applied).
- Every failure is one of the protocol-neutral classes of `tether.transport`, with a `.code`
  from `ERROR_CODES`: an adapter unplugged under an open port (EIO, hang-up, a vanished tty) is
  `PortLost`, whichever call noticed it, never a bare `termios` or `OSError`.
- A device is identified by its USB serial number / VID:PID when the adapter has them, plus the
  PING model number and id of every configured joint, never by tty index alone. One process
  owns a port: an exclusive open plus a `flock` on a lock file keyed by that identity. The lock
  file names the owner's control socket, so other processes can ask the owner instead.
- At connect, every joint's Status Return Level must be 2 (status for all instructions):
  a bus that would not answer writes could never confirm one, so it is refused. So is a servo
  set up so a move would not do what host.toml says (`DeviceSetupError`): an Operating Mode
  other than position control, a time-based profile or torque-on-by-goal-update in its Drive
  Mode, or its own Min/Max Position Limit narrower than the joint's configured limits.
- One exchange at a time; a stop goes first (`DxlBus.priority`): while a thread holds the
  priority, every other thread's next exchange waits until it ends (an exchange already on the
  wire finishes first), so a stop never queues behind a reconciliation's or a status's reads.
"""

from __future__ import annotations

import hashlib
import math
import os
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import serial  # type: ignore[import-untyped]
from serial.serialposix import Serial as _PosixSerial  # type: ignore[import-untyped]

from tether import _core, _held
from tether._coded import CodedError
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import DynamixelPortConfig, JointConfig, RobotConfig
from tether.devices.ports import (
    IdentityLock,
    PortIdentity,
    flock_holder,
    is_locked,
    lock_path,
    read_owner,
    resolve_port,
)
from tether.errors import DxlFrameError
from tether.transport import (
    DeviceError,
    DeviceIdentityError,
    DeviceSetupError,
    PortBusy,
    PortLost,
    TransportError,
    TransportTimeout,
    WriteUnconfirmed,
)

BROADCAST = 0xFE
STATUS_CODES = _core.dxl_status_error_codes()

#: Every `.code` the driver's errors carry: its own, plus a device's status error codes.
ERROR_CODES: tuple[str, ...] = (
    "adapter_ambiguous",
    "adapter_moved",
    "adapter_not_found",
    "drive_mode",
    "lock_failed",
    "model_mismatch",
    "no_status",
    "open_failed",
    "operating_mode",
    "operator_required",
    "owner_no_answer",
    "owner_refused",
    "port_busy",
    "port_lost",
    "port_owned",
    "read_failed",
    "servo_limits",
    "status_return_level",
    "write_failed",
    "write_short",
    "write_unconfirmed",
    *STATUS_CODES[1:],
    "unknown",
)


#: What pyserial and the OS raise when the adapter goes away under an open port.
_PORT_FAILURES = (serial.SerialException, OSError, termios.error)


_E = TypeVar("_E", bound=CodedError)


def _coded(exc_type: type[_E], code: str, message: str, **details: Any) -> _E:
    """One of the driver's errors, with a listed `.code` (a programming error otherwise)."""
    if code not in ERROR_CODES:
        raise ValueError(f"unlisted driver error code {code!r}")
    return exc_type(code, message, details=details)


def _open_gate(ids: list[int]) -> AbstractContextManager[Any]:
    return nullcontext()


class _BusMutex:
    """One exchange at a time on a bus (re-entrant), with a priority lane: while a thread is
    inside `first()`, another thread's next `with` waits for it to end. A thread that already
    holds the mutex never waits for the lane (it would wait for itself)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._lane = threading.Condition(threading.Lock())
        self._first = 0
        self._local = threading.local()

    @contextmanager
    def first(self) -> Iterator[None]:
        local = self._local
        with self._lane:
            self._first += 1
        local.first = getattr(local, "first", 0) + 1
        try:
            yield
        finally:
            local.first -= 1
            with self._lane:
                self._first -= 1
                if not self._first:
                    self._lane.notify_all()

    def __enter__(self) -> None:
        local = self._local
        if self._first and not getattr(local, "first", 0) and not getattr(local, "held", 0):
            with self._lane:
                while self._first:
                    self._lane.wait()
        self._lock.acquire()
        local.held = getattr(local, "held", 0) + 1

    def __exit__(self, *exc: object) -> None:
        self._local.held -= 1
        self._lock.release()


@dataclass
class TxRecord:
    """Evidence of one sent frame: when, what, and its SHA-256."""

    t_ms: int
    instruction: str
    ids: list[int]
    digest: str


@dataclass
class Servo:
    id: int
    model: int
    firmware: int


@dataclass
class BusStats:
    frame_errors: int = 0
    read_retries: int = 0
    alerts: set[int] = field(default_factory=set)


class DxlBus:
    """One open DYNAMIXEL bus. Thread-safe (one transaction at a time); single owner process."""

    def __init__(
        self,
        port: serial.SerialBase,
        identity: PortIdentity,
        timeout_ms: int,
        read_retries: int,
        lock: IdentityLock | None,
    ) -> None:
        self._port = port
        #: A POSIX port is read and written on its descriptor (`_read_fd`, `_write_fd`): two
        #: system calls per chunk where pyserial makes five or six, each a wait for the
        #: interpreter lock on a loaded host. Any other port (a pyserial URL) goes through
        #: pyserial.
        self._posix = isinstance(port, _PosixSerial) and isinstance(getattr(port, "fd", None), int)
        #: When the frames written so far have left the wire (monotonic seconds, estimated
        #: from the baud rate): no status can arrive before.
        self._wire_free_at = 0.0
        self.identity = identity
        self.timeout_s = timeout_ms / 1000.0
        self.read_retries = read_retries
        self._lock = lock
        self._mutex = _BusMutex()
        self._decoder = _core.DxlDecoder()
        self.stats = BusStats()
        self.sent: list[TxRecord] = []
        self.last_status: dict[int, tuple[int, int]] = {}  # id -> (error byte, wall ms)
        self.servos: dict[int, Servo] = {}
        #: Set once an exchange found the adapter gone (`PortLost`): the port is dead for good.
        self.lost = False
        #: Every effectful frame is sent inside `gate(ids)` (the generic host's stop latch).
        self.gate: Callable[[list[int]], AbstractContextManager[Any]] = _open_gate

    @classmethod
    def open(
        cls,
        url: str,
        *,
        baudrate: int = 57600,
        timeout_ms: int = 50,
        read_retries: int = 2,
        lock_dir: Path | None,
        identity: PortIdentity | None = None,
        socket_path: str | None = None,
    ) -> DxlBus:
        """Open `url` (a path or pyserial URL) exclusively; `lock_dir` adds the identity lock."""
        identity = identity or PortIdentity(
            f"path:{os.path.realpath(url)}" if "://" not in url else f"url:{url}", url
        )
        lock = None
        if lock_dir is not None:
            lock = IdentityLock(lock_dir, identity.key)
            lock.acquire(socket_path)
        try:
            port = serial.serial_for_url(
                url,
                baudrate=baudrate,
                timeout=timeout_ms / 1000.0,
                write_timeout=1.0,
                exclusive=True,
            )
        except serial.SerialException as exc:
            if lock is not None:
                lock.release()
            if "lock" in str(exc).lower():
                holder = flock_holder(url)
                who = (
                    "another process"
                    if holder is None
                    else f"process {holder[0]} ({holder[1] or 'its command line unknown'})"
                )
                raise _coded(
                    PortBusy,
                    "port_busy",
                    f"{url}: {who} has this port open exclusively (the tether serve of another"
                    " host configuration, say: use its host.toml, whose state dir reaches it):"
                    " one process drives a bus at a time",
                    port=url,
                    holder_pid=None if holder is None else holder[0],
                ) from exc
            raise _coded(TransportError, "open_failed", f"{url}: {exc}", port=url) from exc
        return cls(port, identity, timeout_ms, read_retries, lock)

    @classmethod
    def open_config(
        cls, cfg: DynamixelPortConfig, *, lock_dir: Path | None, socket_path: str | None = None
    ) -> DxlBus:
        identity = resolve_port(cfg)
        return cls.open(
            identity.device,
            baudrate=cfg.baudrate,
            timeout_ms=cfg.timeout_ms,
            read_retries=cfg.read_retries,
            lock_dir=lock_dir,
            identity=identity,
            socket_path=socket_path,
        )

    def set_control_socket(self, path: str) -> None:
        if self._lock is not None:
            self._lock.set_socket(path)

    def close(self) -> None:
        with self._mutex:
            try:
                self._port.close()
            except _PORT_FAILURES:
                pass  # the adapter is already gone: there is nothing left to close or flush
            finally:
                if self._lock is not None:
                    self._lock.release()

    def __enter__(self) -> DxlBus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def priority(self) -> AbstractContextManager[None]:
        """This thread's exchanges go first while inside (a stop): another thread's next
        exchange waits until it leaves; one already on the wire finishes first."""
        return self._mutex.first()

    # --- one exchange on the wire ---

    def _lost(self, code: str, exc: BaseException) -> PortLost:
        self.lost = True
        # termios.error and OSError carry (errno, strerror); pyserial's own errors a sentence.
        args = exc.args
        if len(args) >= 2 and isinstance(args[0], int):
            what = f"{args[1]} (errno {args[0]})"
        else:
            what = str(exc)
        return _coded(
            PortLost,
            code,
            f"{self.identity.device}: the adapter is gone or failing: {what}",
            port=self.identity.device,
            port_key=self.identity.key,
        )

    def _send(self, frame: bytes, instruction: str, ids: list[int]) -> None:
        try:
            fd = self._port.fd if self._posix else None
            if fd is not None:  # (a closed port: pyserial's own call says so)
                _held.flush_input(fd)
            else:
                self._port.reset_input_buffer()
        except _PORT_FAILURES as exc:
            raise self._lost("port_lost", exc) from exc
        self._decoder.clear()
        self.sent.append(
            TxRecord(int(time.time() * 1000), instruction, ids, hashlib.sha256(frame).hexdigest())
        )
        del self.sent[:-256]
        # A frame leaves the wire after every frame queued before it (a SYNC_WRITE's or an
        # ACTION's, which no status answers, may still be queued): a reply's deadline runs from
        # then (`_wire_free_at`), at the port's baud rate, 10 bits a byte.
        baud = getattr(self._port, "baudrate", 0) or 57600
        start = max(time.monotonic(), self._wire_free_at)
        self._wire_free_at = start + len(frame) * 10 / max(1, baud)
        try:
            if self._posix:
                written = self._write_fd(frame)
            else:
                written = self._port.write(frame)
                self._port.flush()
                self._wire_free_at = time.monotonic()  # drained: on the wire already
        except serial.SerialTimeoutException as exc:
            raise _coded(TransportError, "write_failed", f"{instruction}: {exc}") from exc
        except _PORT_FAILURES as exc:
            raise self._lost("write_failed", exc) from exc
        if written != len(frame):
            raise _coded(TransportError, "write_short", f"wrote {written} of {len(frame)} bytes")

    def _write_fd(self, frame: bytes) -> int:
        """The frame into a POSIX port's output queue in one system call (a frame is far
        smaller than the queue); only when the queue is full does pyserial's write wait for
        room (its write timeout). Not drained (`tcdrain`, another system call): the next
        reply's deadline counts the queued frames' time on the wire instead
        (`_wire_free_at`)."""
        try:
            written = _held.write(self._port.fd, frame)
        except BlockingIOError:
            written = 0
        if written < len(frame):
            written += self._port.write(frame[written:])
        return written

    def _read_fd(self, wait_s: float) -> bytes:
        """What a POSIX port holds, once it holds something or ``wait_s`` passed (b""): one
        wait and one read per chunk. Ready with nothing to read is the adapter gone, as
        pyserial reports it."""
        fd = self._port.fd
        if not _held.wait_readable(fd, max(0, math.ceil(wait_s * 1000))):
            return b""
        try:
            chunk = _held.read(fd, 4096)
        except BlockingIOError:
            return b""
        if not chunk:
            raise serial.SerialException(
                "device reports readiness to read but returned no data (device disconnected?)"
            )
        return chunk

    def _receive(self, ids: list[int]) -> dict[int, _core.DxlPacket]:
        """Status packets from `ids` (in any order) until all arrived or the deadline passed."""
        got: dict[int, _core.DxlPacket] = {}
        deadline = max(time.monotonic(), self._wire_free_at) + self.timeout_s * max(1, len(ids))
        while len(got) < len(ids):
            now = time.monotonic()
            if now > deadline:
                self._decoder.resync()
                break
            try:
                if self._posix:
                    chunk = self._read_fd(min(self.timeout_s, deadline - now))
                else:
                    chunk = self._port.read(max(1, self._port.in_waiting))
            except _PORT_FAILURES as exc:
                raise self._lost("read_failed", exc) from exc
            if not chunk:
                continue
            self._decoder.feed(chunk)
            while True:
                try:
                    packet = self._decoder.next_packet()
                except DxlFrameError:
                    self.stats.frame_errors += 1
                    continue
                if packet is None:
                    break
                if packet.is_status and packet.id in ids and packet.id not in got:
                    got[packet.id] = packet
                    self.last_status[packet.id] = (packet.error or 0, int(time.time() * 1000))
                    if packet.alert:
                        self.stats.alerts.add(packet.id)
                    else:
                        self.stats.alerts.discard(packet.id)
        return got

    @staticmethod
    def _check(packet: _core.DxlPacket, what: str) -> None:
        code = packet.error_code or "none"
        if code != "none":
            raise _coded(
                DeviceError,
                code,
                f"id {packet.id} refused {what} ({code}, alert={packet.alert})",
                id=packet.id,
                alert=packet.alert,
            )

    def _read_exchange(
        self,
        frame: bytes,
        instruction: str,
        ids: list[int],
        length: int | None,
        retries: int | None = None,
    ) -> dict[int, _core.DxlPacket]:
        """A read-only exchange, retried on timeout or corruption (``retries`` times, else the
        port's `read_retries`)."""
        last: Exception | None = None
        for attempt in range(self.read_retries + 1 if retries is None else retries + 1):
            if attempt:
                self.stats.read_retries += 1
            self._send(frame, instruction, ids)
            got = self._receive(ids)
            bad = [
                i
                for i, p in got.items()
                if length is not None and p.error_code == "none" and len(p.data) != length
            ]
            if len(got) == len(ids) and not bad:
                return got
            missing = sorted(set(ids) - set(got)) + bad
            last = _coded(
                TransportTimeout,
                "no_status",
                f"{instruction}: no valid status from ids {missing}",
                ids=missing,
            )
        assert last is not None
        raise last

    def _write_exchange(self, frame: bytes, instruction: str, dxl_id: int) -> _core.DxlPacket:
        """A write: sent once; its status confirms it, its absence leaves it ambiguous."""
        self._send(frame, instruction, [dxl_id])
        got = self._receive([dxl_id])
        if dxl_id not in got:
            raise _coded(
                WriteUnconfirmed,
                "write_unconfirmed",
                f"{instruction} to id {dxl_id} sent, no status: it may or may not have applied",
                id=dxl_id,
            )
        self._check(got[dxl_id], instruction)
        return got[dxl_id]

    # --- instructions ---

    def ping(self, dxl_id: int, *, retries: int | None = None) -> Servo:
        with self._mutex:
            packet = self._read_exchange(_core.dxl_ping(dxl_id), "ping", [dxl_id], 3, retries)[
                dxl_id
            ]
            self._check(packet, "ping")
            servo = Servo(dxl_id, int.from_bytes(packet.data[:2], "little"), packet.data[2])
            self.servos[dxl_id] = servo
            return servo

    def read(self, dxl_id: int, address: int, length: int, *, retries: int | None = None) -> bytes:
        """``length`` bytes at ``address`` of servo ``dxl_id``: one READ, retried ``retries``
        times on timeout or corruption (default: the port's `read_retries`)."""
        with self._mutex:
            packet = self._read_exchange(
                _core.dxl_read(dxl_id, address, length), "read", [dxl_id], length, retries
            )[dxl_id]
            self._check(packet, "read")
            return packet.data

    def read_field(self, dxl_id: int, f: tables.Field, *, retries: int | None = None) -> int:
        return tables.decode(f, self.read(dxl_id, f.address, f.size, retries=retries))

    def sync_read_answered(self, address: int, length: int, ids: list[int]) -> dict[int, bytes]:
        """One SYNC_READ, sent once: the data of every servo that answered it in time, whole
        and without an error; a servo that did not is left out (a stop reads it on its own
        after holding the others, so one silent servo delays them by one exchange, never by
        its retries)."""
        with self._mutex:
            self._send(_core.dxl_sync_read(address, length, ids), "sync_read", list(ids))
            got = self._receive(list(ids))
            return {
                i: p.data
                for i, p in got.items()
                if p.error_code in (None, "none") and len(p.data) == length
            }

    def sync_read(self, address: int, length: int, ids: list[int]) -> dict[int, bytes]:
        with self._mutex:
            got = self._read_exchange(
                _core.dxl_sync_read(address, length, ids), "sync_read", list(ids), length
            )
            for packet in got.values():
                self._check(packet, "sync_read")
            return {i: got[i].data for i in ids}

    def sync_read_field(self, f: tables.Field, ids: list[int]) -> dict[int, int]:
        return {i: tables.decode(f, d) for i, d in self.sync_read(f.address, f.size, ids).items()}

    def write(self, dxl_id: int, address: int, data: bytes) -> None:
        with self.gate([dxl_id]), self._mutex:
            self._write_exchange(_core.dxl_write(dxl_id, address, data), "write", dxl_id)

    def write_field(self, dxl_id: int, f: tables.Field, value: int) -> None:
        self.write(dxl_id, f.address, tables.encode(f, value))

    def reg_write(self, dxl_id: int, address: int, data: bytes) -> None:
        with self.gate([dxl_id]), self._mutex:
            self._write_exchange(_core.dxl_reg_write(dxl_id, address, data), "reg_write", dxl_id)

    def action(self) -> None:
        """Broadcast ACTION: no device answers it, so nothing is awaited."""
        with self.gate([BROADCAST]), self._mutex:
            self._send(_core.dxl_action(BROADCAST), "action", [BROADCAST])

    def sync_write(self, address: int, length: int, entries: list[tuple[int, bytes]]) -> None:
        """Broadcast SYNC_WRITE: no status comes back; confirm by reading back."""
        with self.gate([i for i, _ in entries]), self._mutex:
            self._send(
                _core.dxl_sync_write(address, length, entries),
                "sync_write",
                [i for i, _ in entries],
            )

    def reboot(self, dxl_id: int, *, operator: str) -> None:
        """REBOOT wipes RAM (torque off, staged writes lost); only ever on an operator's word."""
        if not operator:
            raise _coded(DeviceIdentityError, "operator_required", "REBOOT needs a named operator")
        with self.gate([dxl_id]), self._mutex:
            self._write_exchange(_core.dxl_reboot(dxl_id), "reboot", dxl_id)


@dataclass(frozen=True)
class DeviceIdentity:
    """A connected robot: its port identity and the model/firmware each joint id answered."""

    port: PortIdentity
    servos: tuple[tuple[int, int, int], ...]  # (id, model, firmware)

    def as_dict(self) -> dict[str, Any]:
        return {
            "port_key": self.port.key,
            "usb_serial": self.port.usb_serial,
            "vid_pid": self.port.vid_pid,
            "servos": [{"id": i, "model": m, "firmware": f} for i, m, f in self.servos],
        }


def check_robot(bus: DxlBus, robot: RobotConfig, *, retries: int | None = None) -> DeviceIdentity:
    """PING every joint (model must match when configured) and require Status Return Level 2,
    then check how each is set up (`_check_setup`): every joint's identity is known before a
    set-up refusal, which a stop goes past (`DeviceSetupError`). ``retries``: the PINGs'
    (default: the port's `read_retries`; a stop's are 0, so a silent servo costs it one
    exchange); a servo that answered its PING is read with the port's retries."""
    servos = []
    for joint in robot.joints:
        servo = bus.ping(joint.id, retries=retries)
        if joint.model is not None and servo.model != joint.model:
            raise _coded(
                DeviceIdentityError,
                "model_mismatch",
                f"id {joint.id} answered model {servo.model}, configured {joint.model}",
            )
        try:
            level = bus.read_field(joint.id, tables.STATUS_RETURN_LEVEL)
        except TransportTimeout as exc:
            # It answered PING (always answered) but not READ: Status Return Level 0.
            raise _coded(
                DeviceIdentityError,
                "status_return_level",
                f"id {joint.id} answers PING but not READ (Status Return Level 0): "
                "writes would never be confirmed",
            ) from exc
        if level != tables.StatusReturnLevel.ALL.value:
            raise _coded(
                DeviceIdentityError,
                "status_return_level",
                f"id {joint.id} has Status Return Level {level}: writes would never be confirmed",
            )
        servos.append((servo.id, servo.model, servo.firmware))
    for joint in robot.joints:
        _check_setup(bus, joint)
    return DeviceIdentity(bus.identity, tuple(servos))


def _check_setup(bus: DxlBus, joint: JointConfig) -> None:
    """Refuse a servo set up so that Tether's moves would not do what host.toml says
    (`DeviceSetupError`): an Operating Mode other than Position Control, a Drive Mode bit of
    `tables.DRIVE_MODE_REFUSED`, or its own Min/Max Position Limit narrower than the joint's
    configured limits (a goal between the two would be refused, Data Limit Error)."""
    modes = bus.read(joint.id, tables.DRIVE_MODE.address, 2)
    drive, operating = modes[0], modes[1]
    if operating != tables.POSITION_CONTROL:
        mode = tables.OPERATING_MODES.get(operating, "not an X-series mode")
        raise _coded(
            DeviceSetupError,
            "operating_mode",
            f"id {joint.id} is in Operating Mode {operating} ({mode}), not position control"
            f" ({tables.POSITION_CONTROL}), which Tether's moves need; set it with the servo's"
            " torque off (DYNAMIXEL Wizard, or a WRITE of address 11)",
            id=joint.id,
            operating_mode=operating,
        )
    for bit, why in tables.DRIVE_MODE_REFUSED.items():
        if drive & bit:
            raise _coded(
                DeviceSetupError,
                "drive_mode",
                f"id {joint.id} has Drive Mode {drive} with {why}; clear that bit with the"
                " servo's torque off (address 10)",
                id=joint.id,
                drive_mode=drive,
            )
    # Max Position Limit (48), then Min Position Limit (52).
    block = bus.read(joint.id, tables.MAX_POSITION_LIMIT.address, 8)
    high = tables.decode(tables.MAX_POSITION_LIMIT, block[:4])
    low = tables.decode(tables.MIN_POSITION_LIMIT, block[4:])
    if low > joint.min_ticks or high < joint.max_ticks:
        rad = tables.ticks_to_radians
        raise _coded(
            DeviceSetupError,
            "servo_limits",
            f"joint {joint.name} (id {joint.id}): the servo's own position limits"
            f" [{rad(low):+.4f}, {rad(high):+.4f}] rad (Min/Max Position Limit {low}..{high})"
            f" do not hold the configured [{joint.min_rad:+.4f}, {joint.max_rad:+.4f}] rad:"
            " the servo would refuse a goal between the two (Data Limit Error); narrow the"
            " joint's min/max in host.toml, or widen the servo's limits",
            id=joint.id,
            servo_min=low,
            servo_max=high,
        )


__all__ = [
    "BROADCAST",
    "ERROR_CODES",
    "DeviceIdentity",
    "DxlBus",
    "IdentityLock",
    "PortIdentity",
    "Servo",
    "check_robot",
    "is_locked",
    "lock_path",
    "read_owner",
    "resolve_port",
]
