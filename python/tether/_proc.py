"""Linux process facts used as proof: start time from /proc, boot id, and PR_SET_PDEATHSIG."""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

_PR_SET_PDEATHSIG = 1
_PROC = Path("/proc")
#: How often a main thread waiting for a signal wakes to run its handler (s).
SIGNAL_POLL_S = 0.25


def wait_for_signal(event: threading.Event, *, also: Callable[[], bool] | None = None) -> None:
    """Wait in the main thread until a signal handler sets `event` (or `also()` holds).

    In slices of `SIGNAL_POLL_S`: Python runs a signal's handler in the main thread, and a
    signal the kernel hands to another thread of the process does not wake a wait without a
    timeout (the process would run on, deaf to it, until something else woke it)."""
    while not event.wait(SIGNAL_POLL_S) and not (also is not None and also()):
        pass


#: How long a process shutting down waits for its workers, streams and stores once its devices
#: are safe-stopped, before it exits without them (s): a database that stopped answering (a
#: frozen server answers no statement and no timeout of its own runs) must not keep a stopped
#: daemon or worker alive. `TETHER_SHUTDOWN_BOUND_S` sets another bound (> 0).
SHUTDOWN_BOUND_S = 30.0
SHUTDOWN_BOUND_ENV = "TETHER_SHUTDOWN_BOUND_S"


def shutdown_bound_s() -> float:
    """`SHUTDOWN_BOUND_S`, or `$TETHER_SHUTDOWN_BOUND_S` when that is set: a number of
    seconds > 0 (anything else is said on stderr, and the default used)."""
    text = os.environ.get(SHUTDOWN_BOUND_ENV)
    if text is None:
        return SHUTDOWN_BOUND_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if 0 < value < float("inf"):
        return value
    print(
        f"warning: {SHUTDOWN_BOUND_ENV}={text!r} is not a number of seconds above 0:"
        f" using {SHUTDOWN_BOUND_S:g}",
        file=sys.stderr,
    )
    return SHUTDOWN_BOUND_S


def close_within(
    close: Callable[[], object], bound_s: float, *, first: threading.Event | None = None
) -> bool:
    """Run `close` on a thread of its own and wait for it: without a bound until `first` is set
    (what must finish whatever it takes: a device's safe stop, itself bounded by its port's
    timeouts), then at most `bound_s` more. Whether `close` finished; an exception it raised
    is raised here."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            close()
        except BaseException as exc:
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="tether-close", daemon=True).start()
    while first is not None and not first.is_set() and not done.wait(SIGNAL_POLL_S):
        pass
    finished = done.wait(bound_s)
    if failed:
        raise failed[0]
    return finished


#: How long an abandoned shutdown gives the process's exit handlers (a worker's robot_move
#: family safe-stops the robots it connected in one) before it exits anyway (s).
EXIT_HANDLERS_BOUND_S = 10.0


def abandon_shutdown(command: str, bound_s: float) -> NoReturn:
    """Exit now (status 1) without waiting any longer for a shutdown `close_within` gave up
    on, after saying so in one line and running the process's exit handlers (`atexit`: the
    safe stop of robots a family connected is one; at most `EXIT_HANDLERS_BOUND_S`), which
    `os._exit` itself would skip. An attempt it cut short is reconciled by its next claim."""
    message = (
        f"{command}: shutdown_stalled: the workers or stores did not finish within"
        f" {bound_s:g} s (an attempt still running, or a database that stopped answering);"
        " exiting without them: an attempt cut short is reconciled by its next claim"
    )
    shown = logging.getLogger("tether.shutdown")
    if logging.getLogger().handlers or logging.getLogger("tether").handlers:
        shown.error(message)  # the process's log (text or JSON lines) on stderr: said once
    else:
        print(message, file=sys.stderr, flush=True)
    handlers = threading.Thread(
        target=atexit._run_exitfuncs, name="tether-exit-handlers", daemon=True
    )
    handlers.start()
    handlers.join(EXIT_HANDLERS_BOUND_S)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(1)


def boot_id() -> str:
    """This boot's random id: a pid recorded under another boot id is certainly gone."""
    return (_PROC / "sys/kernel/random/boot_id").read_text().strip()


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Field 2 (comm) is parenthesised and may hold spaces or ')': split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat), or None."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when the thread that forked it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}")


@dataclass(frozen=True)
class ProcessIdentity:
    """A process named so that pid reuse cannot fool a liveness check."""

    pid: int
    start_time: int
    boot_id: str
    host: str

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity:
        """Identity of a live local process; raises ProcessLookupError if it does not exist."""
        start = process_start_time(pid)
        if start is None:
            raise ProcessLookupError(pid)
        return cls(pid=pid, start_time=start, boot_id=boot_id(), host=socket.gethostname())

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "pid": self.pid,
            "start_time": self.start_time,
            "boot_id": self.boot_id,
            "host": self.host,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProcessIdentity:
        """Inverse of `to_dict`; raises KeyError/TypeError/ValueError on a malformed record."""
        return cls(
            pid=int(raw["pid"]),
            start_time=int(raw["start_time"]),
            boot_id=str(raw["boot_id"]),
            host=str(raw["host"]),
        )

    def observe(self) -> tuple[bool | None, str]:
        """(alive?, what was observed). None means it cannot be decided from this machine."""
        if self.host != socket.gethostname():
            return None, f"recorded on host {self.host!r}, not this one"
        if self.boot_id != boot_id():
            return False, f"recorded under boot {self.boot_id}; the machine has rebooted since"
        fields = _stat_fields(self.pid)
        if fields is None:
            return False, f"no process {self.pid} exists"
        start = int(fields[19])
        if start != self.start_time:
            return False, f"pid {self.pid} now belongs to a process started at {start}"
        if fields[0] in {"Z", "X"}:
            return False, f"process {self.pid} has exited (state {fields[0]}) and cannot run"
        return True, f"process {self.pid} started at {start} is still running"
