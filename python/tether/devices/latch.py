"""The stop latch: a stop cancels a move in progress, and nothing moves until an operator resumes.

Rules:
- `stop(robot)` latches the robot, durably (a file under the host's state dir, fsynced) and
  in one lock with the safe-stop that follows, so no effectful frame can slip between them.
- Every effectful frame of a move is sent inside `permit(robot)`: under the same lock, it
  raises `MotionStopped` while the robot is latched, so a move that had not sent its ACTION
  when the stop came never sends it. Its code names who latched it (`stop_reason`):
  `stopped_on_session_lapse` for the session watchdog's stop (`SESSION_LAPSE`: the planner's
  heartbeat lapsed mid-motion), `cancelled_by_planner` for a planner's Cancel of a running move
  (`PLANNER_CANCEL`), `stopped_by_operator` for any other stop. A stop of a robot already
  latched keeps the first stop's `by`: an automatic stop never hides an operator's.
- The latch is read from its file on every check, so it survives a restart of the host and is
  honoured by every process on the state dir.
- A robot's first record creates its file (written, synced, renamed in, the dir synced); later
  records overwrite it in place, padded to one 512-byte sector (`RECORD_BYTES`): one write and
  one fdatasync, no rename and no dir sync, and with the file's size and blocks unchanged no
  filesystem journal commit is waited for. The stop frames go only after that sync returns, so
  a record torn by a crash belongs to a stop that sent nothing; an unreadable record is a latch.
- Only `resume(robot, operator)` clears it, recording who and when; the safe-stop itself runs
  inside `stopping()`, the one context a latched robot's frames may be sent from.
- A stop is never held back by its disk: a record that cannot be written at all (a read-only
  or full disk, a latch dir that is not a dir) latches the robot in this process's memory
  (`unwritten` says why), the stop frames go anyway, and the stop's report says its latch is
  not durable (another process, or this one after a restart, does not see it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from tether import _held
from tether._dirs import usable_dir
from tether.errors import TetherError
from tether.operations._durable import write_durable
from tether.transport import DeviceError

log = logging.getLogger("tether.devices.latch")

#: Every latch record after a robot's first is this many bytes, overwritten in place.
RECORD_BYTES = 512
#: The suffix of a robot's shutdown-stop record beside its latch record (`note_shutdown_stop`).
SHUTDOWN_SUFFIX = ".shutdown.json"
#: The `by` of an operator's stop (`tether stop`, the console's; the Stop RPC's names its
#: principal instead): any stop not made by the session watchdog or a planner's Cancel.
OPERATOR_STOP = "tether stop"
#: The `by` of a latch the session watchdog set (`tether.serve.sessions`): the heartbeat of
#: the session a move ran under lapsed, and no operator pressed stop.
SESSION_LAPSE = "session heartbeat lapsed"
#: The `by` of a latch a planner's `Cancel` of a running move set (the gRPC service).
PLANNER_CANCEL = "planner cancel"
#: The reason (an evidence reason, a `MotionStopped` code) each such `by` names, and its cause
#: in words; any other stop is `stopped_by_operator`. (`session_lapsed`, without "stopped_on",
#: is the result of a move whose own session lapsed before it started: nothing was sent.)
_REASONS: dict[str, tuple[str, str]] = {
    SESSION_LAPSE: ("stopped_on_session_lapse", "a move's session heartbeat lapsed"),
    PLANNER_CANCEL: ("cancelled_by_planner", "a planner cancelled its running move"),
}
#: Each automatic stop's reason and its cause in words (`tether status` shows the cause).
STOP_CAUSES: Final = {code: cause for code, cause in _REASONS.values()}


class MotionStopped(DeviceError):
    """A stop latched this robot: nothing is sent to it until an operator resumes it
    (`tether operator resume ROBOT`); code `stopped_by_operator`, or the reason of the
    session watchdog's or a planner Cancel's stop (`stop_reason`)."""


#: Every reason `stop_reason` names.
STOP_REASONS: Final = ("stopped_by_operator", *(code for code, _ in _REASONS.values()))


#: The longest principal name a latch's `by` holds (`stopped_by`): a latch record stays small
#: whatever a configuration names its principals.
BY_NAME_MAX: Final = 64


def stopped_by(way: str, role: str, name: str) -> str:
    """A latch's `by` for a stop a principal made through `way` (``gRPC Stop``, ``console
    Stop``): ``WAY by ROLE NAME``, the name cut to `BY_NAME_MAX` characters."""
    return f"{way} by {role} {name[:BY_NAME_MAX]}"


def stop_reason(by: str | None) -> str:
    """Why a stop made `by` (a latch's author, `StopLatch.stop_reason`) was made:
    `stopped_on_session_lapse` for the session watchdog's, `cancelled_by_planner` for a
    planner's Cancel, `stopped_by_operator` for any other (none named included: an unreadable
    or older record)."""
    return _REASONS[by][0] if by in _REASONS else "stopped_by_operator"


def stop_words(reason: str, by: str | None = None) -> str:
    """How a stop of `reason` (`stop_reason`) was made, in words; ``by`` (the latch's author)
    names who made any other than `tether stop`'s (a planner's gRPC Stop is no operator's)."""
    cause = STOP_CAUSES.get(reason)
    if cause:
        return f"was safe-stopped when {cause}"
    if by and by != OPERATOR_STOP:
        return f"was stopped ({by})"
    return "was stopped by an operator"


class StopLatch:
    """The latch of every robot under one state dir (thread-safe; one lock per host)."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "latches"
        self.lock = threading.RLock()
        self._local = threading.local()
        #: The latch dir passed `usable_dir` (checked at the first write, not at each: a stop's
        #: latch write then costs no walk of the dir's ancestors; only their owners, root or
        #: this uid, could swap the dir afterwards).
        self._dir_checked = False
        #: Robots latched in memory only: (why their latch record could not be written, who
        #: latched them: the record's `by`).
        self._held: dict[str, tuple[str, str]] = {}
        #: How many resumes this latch made: a stop that reads it before and after knows,
        #: without reading their records, that every robot it latched still is.
        self.resumes = 0

    def _path(self, robot: str, suffix: str = ".json") -> Path:
        return self.dir / f"{hashlib.sha256(robot.encode()).hexdigest()[:32]}{suffix}"

    def _check_dir(self) -> None:
        if not self._dir_checked:
            usable_dir(self.dir, what="the stop latch dir")  # private, never a foreign one
            self._dir_checked = True

    def state(self, robot: str) -> dict[str, Any]:
        """The robot's latch record (`latched` false when it was never stopped)."""
        try:
            doc = json.loads(_held.read_file(self._path(robot)))
        except FileNotFoundError:
            return {"robot": robot, "latched": False}
        except (OSError, ValueError):
            # An unreadable latch is a latch: a torn record never lets a robot move.
            return {"robot": robot, "latched": True, "unreadable": True}
        return doc if isinstance(doc, dict) else {"robot": robot, "latched": True}

    def latched(self, robot: str) -> bool:
        return robot in self._held or bool(self.state(robot).get("latched"))

    def unwritten(self, robot: str) -> str | None:
        """Why `robot`'s latch is held in memory only (its record could not be written), or
        None when its record holds it."""
        held = self._held.get(robot)
        return None if held is None else held[0]

    def _author(self, robot: str, doc: dict[str, Any] | None = None) -> str | None:
        """Who made the robot's last stop: its latch in memory's, else its record's `by` (a
        resumed record's `stopped_by`; ``doc``: that record, already read); None when neither
        names one."""
        if robot in self._held:
            return self._held[robot][1]
        if doc is None:
            doc = self.state(robot)
        by = doc.get("by", doc.get("stopped_by"))
        return by if isinstance(by, str) else None

    def _write(self, robot: str, doc: dict[str, Any]) -> None:
        self._check_dir()
        path = self._path(robot)
        data = json.dumps(doc, sort_keys=True).encode()
        if len(data) < RECORD_BYTES:
            data += b" " * (RECORD_BYTES - 1 - len(data)) + b"\n"  # JSON allows the padding
            if _overwrite(path, data):
                return
        write_durable(path, data)  # the first record (or an outsized one): a new file

    def latch(self, robot: str, *, by: str = OPERATOR_STOP) -> dict[str, Any]:
        """Latch `robot` now (call inside `stopping()`, before the safe-stop's frames). Never
        raises: a record that cannot be written latches it in memory (see the module rules)."""
        with self.lock:
            # Stopped again: the first stop's author stays named (its record read once).
            before = None if robot in self._held else self.state(robot)
            if before is None or before.get("latched"):
                by = self._author(robot, before) or by
            doc = {"robot": robot, "latched": True, "stopped_at_ms": _now_ms(), "by": by}
            try:
                self._write(robot, doc)
            except Exception as exc:  # the stop goes on: never held back by its disk
                why = f"{type(exc).__name__}: {exc}"
                self._held[robot] = (why, by)
                log.warning("stop latch of %s not written (%s): latched in memory only", robot, why)
                return {**doc, "durable": False}
            self._held.pop(robot, None)
            return doc

    def resume(self, robot: str, *, operator: str) -> dict[str, Any]:
        """Clear the latch, recording the operator who resumed it."""
        with self.lock:
            before = self.state(robot)
            if robot not in self._held and not before.get("latched"):
                # Nothing to resume: said as that, and the record of the last resume kept (a
                # second resume rewrote it, as if someone had just resumed a stopped robot).
                return {
                    "robot": robot,
                    "latched": False,
                    "not_latched": True,
                    "asked_by": operator,
                    "stopped_at_ms": before.get("stopped_at_ms"),
                    "last_resumed_at_ms": before.get("resumed_at_ms"),
                    "last_resumed_by": before.get("resumed_by"),
                }
            doc = {
                "robot": robot,
                "latched": False,
                "stopped_at_ms": before.get("stopped_at_ms"),
                "resumed_at_ms": _now_ms(),
                "resumed_by": operator,
                # Who made the stop it resumes: a reconcile after the resume still names it.
                "stopped_by": self._author(robot, before),
            }
            self._write(robot, doc)  # not written: it stays latched (the error is raised)
            self._held.pop(robot, None)
            self.resumes += 1
            return doc

    def note_shutdown_stop(self, robot: str) -> None:
        """Record (durably, best effort) that this host safe-stopped `robot` as it shut down:
        not a latch (nothing waits for a resume), only the fact a reconcile after the restart
        names as why a move it cut stands where it does (`last_shutdown_stop_ms`). A record
        that cannot be written is logged: the stop itself went."""
        doc = {"robot": robot, "stopped_at_ms": _now_ms()}
        try:
            self._check_dir()
            write_durable(self._path(robot, SHUTDOWN_SUFFIX), json.dumps(doc).encode())
        except (OSError, TetherError) as exc:
            log.warning("shutdown stop of %s not recorded: %s", robot, exc)

    def last_shutdown_stop_ms(self, robot: str) -> int | None:
        """When this host last safe-stopped `robot` at its shutdown (wall ms), or None."""
        try:
            at = json.loads(self._path(robot, SHUTDOWN_SUFFIX).read_bytes()).get("stopped_at_ms")
        except (OSError, ValueError, AttributeError):
            return None
        return at if isinstance(at, int) and not isinstance(at, bool) else None

    def last_stop_ms(self, robot: str) -> int | None:
        """When an operator last stopped `robot` (wall ms), or None."""
        at = self.state(robot).get("stopped_at_ms")
        return at if isinstance(at, int) else None

    def author(self, robot: str) -> str | None:
        """Who made the robot's last stop (its latch's `by`: ``tether stop``, ``gRPC Stop by
        planner NAME``, ...), or None when no record names one."""
        return self._author(robot)

    def stop_reason(self, robot: str) -> str:
        """`stop_reason` of the robot's latch record (or of its latch in memory): why its last
        stop was made."""
        return stop_reason(self._author(robot))

    @contextmanager
    def stopping(self) -> Iterator[None]:
        """Hold the lock for a stop; frames sent inside pass the latch (they are the stop)."""
        with self.lock:
            depth = getattr(self._local, "stopping", 0)
            self._local.stopping = depth + 1
            try:
                yield
            finally:
                self._local.stopping = depth

    def check(self, robots: list[str]) -> None:
        """Raise `MotionStopped` when any of `robots` is latched (call under `lock`)."""
        if getattr(self._local, "stopping", 0):
            return
        for robot in robots:
            if self.latched(robot):
                by = self._author(robot)
                reason = stop_reason(by)
                raise MotionStopped(
                    reason,
                    f"robot {robot} {stop_words(reason, by)}: nothing is sent to it until an"
                    " operator resumes it"
                    f" (tether operator resume {robot})",
                    details={"robot": robot},
                )

    @contextmanager
    def permit(self, robots: list[str]) -> Iterator[None]:
        """Send one effectful frame inside this: refused while a robot is latched, and no stop
        can land between the check and the frame."""
        with self.lock:
            self.check(robots)
            yield


def _overwrite(path: Path, data: bytes) -> bool:
    """Overwrite the record at `path` in place and sync it, when the file holds a record of the
    same size (see the module rules); False, with nothing written, when it does not."""
    try:
        fd = _held.open_fd(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:  # a stop's record: its calls keep the interpreter lock (`tether._held`)
        if _held.size(fd) != len(data):
            return False
        if _held.pwrite(fd, data, 0) != len(data):
            raise OSError(f"{path}: short write of the latch record")
        _held.fdatasync(fd)
    finally:
        _held.close(fd)
    return True


def _now_ms() -> int:
    return int(time.time() * 1000)


__all__ = ["BY_NAME_MAX", "MotionStopped", "StopLatch", "stopped_by"]
