"""Single-instance locks of `tether serve`: `<state_dir>/serve.lock` and `<data_dir>/serve.lock`.

Each is an exclusive `flock` on a 0600 file that records the holder (pid, control socket, data
dir, stream address). The kernel drops a flock when its process dies, so a lock left by a
SIGKILLed daemon is free: the next daemon takes it and rewrites the record. Only the holder of
the state dir's lock ever binds `serve.sock` (replacing a socket a dead daemon left), so a live
daemon's socket is never unlinked. A client finds the daemon by the lock being held.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tether._coded import CodedError
from tether.devices.ports import is_locked, read_owner, take_exclusive


class DaemonRunning(CodedError):
    """Another `tether serve` holds this state dir, data dir or port (`daemon_running`)."""


class InstanceLock:
    """An exclusive, non-blocking flock on `path`; the file holds the owner's record."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    def acquire(self, record: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            take_exclusive(fd)  # a client testing the lock (`running`) is no owner
        except BlockingIOError:
            os.close(fd)
            owner = read_owner(self.path)
            raise DaemonRunning(
                "daemon_running",
                f"tether serve already runs for {self.what} {self.path.parent} "
                f"(pid {owner.get('pid', '?')})",
                details={"lock": str(self.path), "owner": owner},
            ) from None
        self._fd = fd
        try:
            self.write(record)
        except OSError:
            self.release()
            raise

    def write(self, record: dict[str, Any]) -> None:
        """Rewrite the owner's record; an error the disk gives (full, read-only) names the
        lock file (a write on a descriptor names none)."""
        if self._fd is not None:
            data = json.dumps({"pid": os.getpid(), **record}, sort_keys=True).encode()
            try:
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, data, 0)
                os.fsync(self._fd)
            except OSError as exc:
                if exc.filename is not None:
                    raise
                raise OSError(exc.errno, exc.strerror, str(self.path)) from exc

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def running(path: Path) -> dict[str, Any] | None:
    """The record of the daemon holding the lock at `path`, or None when none holds it."""
    if not is_locked(path):
        return None
    return read_owner(path) or {"pid": None}


__all__ = ["DaemonRunning", "InstanceLock", "running"]
