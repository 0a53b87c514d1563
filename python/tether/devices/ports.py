"""Port identity and exclusive ownership, for every device type.

- A port is found by its USB serial number and/or VID:PID when the configuration gives them
  (the adapter is the same whichever tty index it got), else by its path or pyserial URL.
  `resolve_port` returns a `PortIdentity` whose `key` names the ownership lock.
- One process owns a port: an exclusive `flock` on a lock file in the host's state dir, keyed
  by that identity (`IdentityLock`), taken before the port is opened. The lock file records
  the owner's pid and control socket, so other processes ask the owner instead of the port.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from tether import _flock
from tether._dirs import usable_dir
from tether.transport import DeviceIdentityError, PortBusy, TransportError

#: Every `.code` raised here.
CODES: Final = (
    "adapter_ambiguous",
    "adapter_moved",
    "adapter_not_found",
    "lock_failed",
    "port_owned",
)


class PortLocator(Protocol):
    """The generic part of a port's configuration: how to find it."""

    @property
    def name(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def usb_serial(self) -> str | None: ...
    @property
    def vid_pid(self) -> str | None: ...


@dataclass(frozen=True)
class PortIdentity:
    """What a port is, independent of its tty index. `key` names the ownership lock."""

    key: str
    device: str
    usb_serial: str | None = None
    vid_pid: str | None = None


def _comports() -> list[Any]:
    from serial.tools import list_ports  # type: ignore[import-untyped]

    return list(list_ports.comports())


def _usb_info(device: str) -> tuple[str | None, str | None]:
    real = os.path.realpath(device)
    for port in _comports():
        if os.path.realpath(port.device) == real and port.vid is not None:
            return port.serial_number, f"{port.vid:04x}:{port.pid:04x}"
    return None, None


def resolve_port(cfg: PortLocator) -> PortIdentity:
    """Find the configured adapter: by USB serial / VID:PID when given, else by path or URL."""
    if cfg.usb_serial is not None or cfg.vid_pid is not None:
        matches = []
        for port in _comports():
            vid_pid = f"{port.vid:04x}:{port.pid:04x}" if port.vid is not None else None
            if cfg.usb_serial is not None and port.serial_number != cfg.usb_serial:
                continue
            if cfg.vid_pid is not None and vid_pid != cfg.vid_pid:
                continue
            matches.append((port, vid_pid))
        if len(matches) != 1:
            what = "no adapter" if not matches else f"{len(matches)} adapters"
            raise DeviceIdentityError(
                "adapter_not_found" if not matches else "adapter_ambiguous",
                f"port {cfg.name}: {what} with usb_serial={cfg.usb_serial} vid_pid={cfg.vid_pid}",
                details={"port": cfg.name},
            )
        port, vid_pid = matches[0]
        if (
            cfg.url is not None
            and "://" not in cfg.url
            and os.path.realpath(cfg.url) != os.path.realpath(port.device)
        ):
            raise DeviceIdentityError(
                "adapter_moved",
                f"port {cfg.name}: {cfg.url} is not {port.device}",
                details={"port": cfg.name},
            )
        return PortIdentity(
            f"usb:{vid_pid}:{port.serial_number}", port.device, port.serial_number, vid_pid
        )
    assert cfg.url is not None  # config validation guarantees one way to find the port
    if "://" in cfg.url:
        return PortIdentity(f"url:{cfg.url}", cfg.url)
    usb_serial, vid_pid = _usb_info(cfg.url)
    if usb_serial is not None or vid_pid is not None:
        return PortIdentity(f"usb:{vid_pid}:{usb_serial}", cfg.url, usb_serial, vid_pid)
    return PortIdentity(f"path:{os.path.realpath(cfg.url)}", cfg.url)


_LOCK_PREFIX = "dxl-"


def lock_path(lock_dir: Path, key: str) -> Path:
    return lock_dir / f"{_LOCK_PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:20]}.lock"


def port_owners(lock_dir: Path) -> list[dict[str, Any]]:
    """The record (`pid`, `socket`) of each process that owns a port under ``lock_dir`` now
    (its identity lock held), whatever port it is: for a `tether stop` that cannot read which
    ports its host file names. Never raises: an unreadable dir owns nothing."""
    try:
        paths = sorted(lock_dir.glob(f"{_LOCK_PREFIX}*.lock"))
    except OSError:
        return []
    return [read_owner(p) for p in paths if is_locked(p)]


class IdentityLock:
    """An exclusive `flock` keyed by device identity; the file records owner pid and socket."""

    def __init__(self, lock_dir: Path, key: str) -> None:
        self.path = lock_path(lock_dir, key)
        self.key = key
        self._fd: int | None = None

    def acquire(self, socket_path: str | None = None) -> None:
        usable_dir(self.path.parent, what="the host's state_dir")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            # The port cannot be owned, so it is not opened.
            raise TransportError(
                "lock_failed",
                f"cannot create the ownership lock {self.path}: {exc.strerror}",
                details={"lock": str(self.path)},
            ) from exc
        try:
            take_exclusive(fd)
        except BlockingIOError:
            os.close(fd)
            owner = read_owner(self.path)
            raise PortBusy(
                "port_owned",
                f"{self.key} is owned by pid {owner.get('pid')} (socket {owner.get('socket')})",
                details={"owner": owner},
            ) from None
        self._fd = fd
        self.set_socket(socket_path)

    def set_socket(self, socket_path: str | None) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(
                self._fd,
                json.dumps({"pid": os.getpid(), "key": self.key, "socket": socket_path}).encode(),
                0,
            )

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def read_owner(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


#: How long `take_exclusive` tries again for an exclusive lock it could not take at once: a
#: process testing whether the lock is held (`is_locked`, any `tether status` or client)
#: holds it shared for a moment, which must never be taken for an owner.
TAKE_RETRY_S = 0.25


def take_exclusive(fd: int) -> None:
    """An exclusive non-blocking `flock` on ``fd``; `BlockingIOError` only when another
    process still holds it after `TAKE_RETRY_S` (an owner, not a passing `is_locked`)."""
    _flock.take_exclusive(fd, within_s=TAKE_RETRY_S)


def is_locked(path: Path) -> bool:
    """True while some process holds the identity lock at `path`. (It tests by taking the
    lock shared for a moment: an exclusive taker meanwhile tries again, `take_exclusive`.)"""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def flock_holder(path: str) -> tuple[int, str] | None:
    """The process holding a `flock` on the device at ``path`` (an exclusive open of a serial
    port is one), read off `/proc/locks`: its pid and its command line (cut to 160
    characters), or None when none is found (no such lock, not Linux, or not readable)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue  # a waiter's line, or another kind of lock
        try:
            major, minor, inode = parts[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) != want:
                continue
            pid = int(parts[4])
        except ValueError:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            words = ""
        return pid, words[:160]
    return None


def owner_of(state_dir: Path, cfg: PortLocator) -> tuple[PortIdentity, dict[str, Any]] | None:
    """The port's identity and its owner's record (`pid`, `socket`) while a process owns it
    (its identity lock is held), else None."""
    identity = resolve_port(cfg)
    path = lock_path(state_dir, identity.key)
    if not is_locked(path):
        return None
    return identity, read_owner(path)


def owner_socket_of(state_dir: Path, cfg: PortLocator) -> str | None:
    """The control socket of the process owning the port, or None when nobody owns it."""
    owned = owner_of(state_dir, cfg)
    if owned is None:
        return None
    identity, owner = owned
    socket_path = owner.get("socket")
    if not isinstance(socket_path, str):
        raise PortBusy(
            "port_owned",
            f"{identity.key} is owned by a process without a control socket",
            details={"port": cfg.name},
        )
    return socket_path


__all__ = [
    "CODES",
    "IdentityLock",
    "PortIdentity",
    "PortLocator",
    "is_locked",
    "lock_path",
    "owner_of",
    "owner_socket_of",
    "port_owners",
    "read_owner",
    "resolve_port",
    "TAKE_RETRY_S",
    "take_exclusive",
]
