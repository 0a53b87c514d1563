"""System calls that keep the interpreter lock, for a stop (`holding`).

Every blocking call Python makes (a read, a write, a wait for a port, an fsync) lets go of the
interpreter lock and takes it back when the call returns. On a loaded daemon, taking it back
means waiting for whichever busy thread holds it to be made to give it up: up to the switch
interval each time (`tether.serve.daemon.SWITCH_INTERVAL_S`), and a stop makes some thirty
such calls (its latch record, then four exchanges on the bus), so a stop under a flood of
other requests waited on the lock far longer than on its device.

Inside `holding()` (a stop's priority, `tether._priority.stop_priority`), the stop's own calls
go through the C library with the lock kept (`ctypes.PyDLL`), so no other thread of the
process runs between a stop's frames. The switch interval is raised for as long as a stop
holds on (`HELD_SWITCH_S`), so the threads waiting for the lock do not take it back from the
stop between two of its calls. What may block long is bounded: a wait for a device's reply
keeps the lock for at most `HELD_WAIT_MS` (the rest of its deadline is waited with the lock
let go), so a robot that does not answer never freezes the daemon for its whole timeout.

Outside `holding()` (and where the C library cannot be loaded) each function is the plain
`os` call."""

from __future__ import annotations

import contextlib
import ctypes
import errno as _errno
import os
import select
import sys
import termios
import threading
from collections.abc import Iterator

#: The longest a wait for a device's reply keeps the interpreter lock (ms).
HELD_WAIT_MS = 20
#: The switch interval while a stop holds on (s): longer than the stop's own work between
#: two of its calls, so a waiting thread does not take the lock back in between; short enough
#: that one of the stop's calls made through plain `os` (a log line, say) waits no longer than
#: this for the lock it let go. `benches/grpc_control.py` part 2 measured the loaded Stop p50
#: 6.6 to 7.0 ms with `holding()` against 11.0 to 12.8 ms without it, interleaved.
HELD_SWITCH_S = 0.02

_local = threading.local()
_lock = threading.Lock()
_holders = 0
_switch: float | None = None


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def _libc() -> ctypes.PyDLL | None:
    try:
        lib = ctypes.PyDLL(None, use_errno=True)
        for name, args, res in (
            ("read", [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_ssize_t),
            ("write", [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_ssize_t),
            ("pwrite", [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long],
             ctypes.c_ssize_t),
            ("poll", [ctypes.POINTER(_PollFd), ctypes.c_ulong, ctypes.c_int], ctypes.c_int),
            ("fdatasync", [ctypes.c_int], ctypes.c_int),
            ("open", [ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
            ("close", [ctypes.c_int], ctypes.c_int),
            ("lseek", [ctypes.c_int, ctypes.c_long, ctypes.c_int], ctypes.c_long),
            ("pread", [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long],
             ctypes.c_ssize_t),
            ("tcflush", [ctypes.c_int, ctypes.c_int], ctypes.c_int),
        ):  # fmt: skip
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
    except (OSError, AttributeError):  # no C library to call: every call is the os one
        return None
    return lib


_c = _libc()


def active() -> bool:
    """Whether this thread is inside `holding()` (and the lock can be kept)."""
    return _c is not None and getattr(_local, "depth", 0) > 0


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """This thread's calls through this module keep the interpreter lock, and the switch
    interval is `HELD_SWITCH_S`, until the outermost `holding()` of every thread ends."""
    global _holders, _switch
    _local.depth = getattr(_local, "depth", 0) + 1
    with _lock:
        if not _holders:
            _switch = sys.getswitchinterval()
            sys.setswitchinterval(HELD_SWITCH_S)
        _holders += 1
    try:
        yield
    finally:
        _local.depth -= 1
        with _lock:
            _holders -= 1
            if not _holders and _switch is not None:
                sys.setswitchinterval(_switch)
                _switch = None


def _failed(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def _retrying(call: object) -> int:
    """`call()` again while it fails with EINTR (as Python's own calls do)."""
    assert callable(call)
    while True:
        n = int(call())
        if n >= 0 or ctypes.get_errno() != _errno.EINTR:
            return n


def write(fd: int, data: bytes) -> int:
    """`os.write`."""
    if not active():
        return os.write(fd, data)
    assert _c is not None
    n = _retrying(lambda: _c.write(fd, data, len(data)))
    if n < 0:
        if ctypes.get_errno() in (_errno.EAGAIN, _errno.EWOULDBLOCK):
            raise BlockingIOError(ctypes.get_errno(), "write would block")
        raise _failed("write")
    return n


def pwrite(fd: int, data: bytes, offset: int) -> int:
    """`os.pwrite`."""
    if not active():
        return os.pwrite(fd, data, offset)
    assert _c is not None
    n = _retrying(lambda: _c.pwrite(fd, data, len(data), offset))
    if n < 0:
        raise _failed("pwrite")
    return n


def read(fd: int, size: int) -> bytes:
    """`os.read`."""
    if not active():
        return os.read(fd, size)
    assert _c is not None
    buf = ctypes.create_string_buffer(size)
    n = _retrying(lambda: _c.read(fd, buf, size))
    if n < 0:
        if ctypes.get_errno() in (_errno.EAGAIN, _errno.EWOULDBLOCK):
            raise BlockingIOError(ctypes.get_errno(), "read would block")
        raise _failed("read")
    return buf.raw[:n]


def open_fd(path: os.PathLike[str] | str, flags: int) -> int:
    """`os.open(path, flags)` (no file is created: no mode)."""
    if not active():
        return os.open(path, flags)
    assert _c is not None
    name = os.fsencode(path)
    fd = _retrying(lambda: _c.open(name, flags))
    if fd < 0:
        code = ctypes.get_errno()
        error = {_errno.ENOENT: FileNotFoundError}.get(code, OSError)
        raise error(code, os.strerror(code), os.fsdecode(name))
    return fd


def close(fd: int) -> None:
    """`os.close`."""
    if not active():
        os.close(fd)
        return
    assert _c is not None
    if _c.close(fd) < 0 and ctypes.get_errno() != _errno.EINTR:
        raise _failed("close")


def size(fd: int) -> int:
    """The size of the file open at `fd` (its offset is left at the end)."""
    if not active():
        return os.fstat(fd).st_size
    assert _c is not None
    n = int(_c.lseek(fd, 0, os.SEEK_END))
    if n < 0:
        raise _failed("lseek")
    return n


def read_file(path: os.PathLike[str] | str) -> bytes:
    """`Path(path).read_bytes()`."""
    if not active():
        with open(path, "rb") as f:
            return f.read()
    assert _c is not None
    fd = open_fd(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        want = size(fd)
        buf = ctypes.create_string_buffer(max(1, want))
        n = _retrying(lambda: _c.pread(fd, buf, want, 0))
        if n < 0:
            raise _failed("pread")
        return buf.raw[:n]
    finally:
        close(fd)


def fdatasync(fd: int) -> None:
    """`os.fdatasync`."""
    if not active():
        os.fdatasync(fd)
        return
    assert _c is not None
    if _retrying(lambda: _c.fdatasync(fd)) < 0:
        raise _failed("fdatasync")


def flush_input(fd: int) -> None:
    """`termios.tcflush(fd, termios.TCIFLUSH)`: what was received and not read is dropped."""
    if not active():
        termios.tcflush(fd, termios.TCIFLUSH)
        return
    assert _c is not None
    if _retrying(lambda: _c.tcflush(fd, termios.TCIFLUSH)) < 0:
        raise termios.error(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def wait_readable(fd: int, timeout_ms: int) -> bool:
    """Whether `fd` is readable (or at its end, or failed) within `timeout_ms`. Inside
    `holding()` the first `HELD_WAIT_MS` are waited with the lock kept, the rest let go."""
    if active():
        assert _c is not None
        held = min(timeout_ms, HELD_WAIT_MS)
        pfd = _PollFd(fd, select.POLLIN, 0)
        n = _retrying(lambda: _c.poll(ctypes.byref(pfd), 1, held))
        if n < 0:
            raise _failed("poll")
        if n > 0 or held >= timeout_ms:
            return n > 0
        timeout_ms -= held
    waiting = select.poll()  # not select(): a daemon's descriptors may pass FD_SETSIZE
    waiting.register(fd, select.POLLIN)
    return bool(waiting.poll(timeout_ms))


__all__ = [
    "HELD_SWITCH_S",
    "HELD_WAIT_MS",
    "active",
    "close",
    "fdatasync",
    "flush_input",
    "holding",
    "open_fd",
    "pwrite",
    "read",
    "read_file",
    "size",
    "wait_readable",
    "write",
]
