"""Directories Tether keeps state in (a data dir, a host's state dir), checked before use.

A path that is a file, or under a file, or that cannot be created is refused with one
`DataDirError` naming the path and what it is for, before anything is opened or written under
it, instead of failing later inside SQLite, the artifact store or a lock with a traceback.

Rules (every directory `usable_dir` returns is private to the caller's uid):
- A directory Tether creates is 0700, and the process umask is tightened to 077 first
  (`private_umask`), so every file created under it afterwards (SQLite catalogs and their
  `-wal`/`-shm`, journals, locks, latches, sockets) is 0600 at most, whatever mode the
  creating call names.
- An existing directory is refused when the path itself is a symlink
  (`symlinked_directory`), when it is owned by another uid (`foreign_directory`), or when
  group or others may write to it (`insecure_directory`): someone else could have planted or
  could swap its files. One of ours that others may only read or traverse is tightened to 0700.
- Every ancestor must be owned by root or the caller, and not writable by others unless it is
  sticky (like `/tmp`): otherwise its owner could rename the directory away and put another in
  its place (`insecure_directory`, the ancestor named).
- `tether stop` alone is never refused for a dir of one's own that others may write to or that
  is reached through a symlink: it says so, then stops (`tolerating`).
- The default state dir (`default_state_dir`) is `~/.local/state/tether`: never a guessable
  shared `/tmp` path, the same for every process of the user whatever its environment, and
  kept across a logout or a reboot (it holds the stop latches).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from tether._coded import CodedError

#: The codes a DataDirError carries (`not_a_data_dir`: a directory without a Tether catalog).
CODES: Final = (
    "no_such_directory",
    "not_a_directory",
    "unusable_directory",
    "not_a_data_dir",
    "foreign_directory",
    "insecure_directory",
    "symlinked_directory",
)
#: The umask bits every Tether process sets before it creates a file: nothing for group/others.
PRIVATE_UMASK: Final = 0o077


class DataDirError(CodedError):
    """A data or state directory cannot be used (a file, not creatable, or not private)."""


def private_umask() -> None:
    """Add group and other bits to the process umask (idempotent; never loosens it)."""
    old = os.umask(PRIVATE_UMASK)
    os.umask(old | PRIVATE_UMASK)


def _home() -> Path:
    home = os.environ.get("HOME")
    if home and os.path.isabs(home):
        return Path(home)
    return Path(pwd.getpwuid(os.geteuid()).pw_dir)


def default_state_dir() -> Path:
    """Where a host keeps its locks, control sockets and latches when `host.state_dir` is unset:
    `~/.local/state/tether` (`$HOME` when it is absolute, else the user's home in the password
    database). Never a shared `/tmp` name another local user could create first.

    No environment variable but `HOME` moves it, because every process of the user must find
    the same latches: a robot stopped from a login shell (which sets `XDG_RUNTIME_DIR`, say)
    must stay stopped for a service or a cron job that does not set it. Nor is it under
    `$XDG_RUNTIME_DIR`, which is emptied at the user's last logout and at every boot: a stop
    latch holds until an operator resumes the robot."""
    return _home() / ".local" / "state" / "tether"


def legacy_state_dirs() -> list[Path]:
    """Where an earlier Tether kept the default state dir and this one no longer looks:
    `$XDG_RUNTIME_DIR/tether` and `$XDG_STATE_HOME/tether` (when set, absolute, and not the
    default now), each only if it holds stop latches or a daemon's lock: state that must not
    be left behind unseen (a robot latched there would run again)."""
    now = default_state_dir()
    found: list[Path] = []
    for var in ("XDG_RUNTIME_DIR", "XDG_STATE_HOME"):
        base = os.environ.get(var)
        if not base or not os.path.isabs(base):
            continue
        old = Path(base) / "tether"
        if old == now or old in found:
            continue
        try:
            latches = any((old / "latches").iterdir()) if (old / "latches").is_dir() else False
            if latches or (old / "serve.lock").exists():
                found.append(old)
        except OSError:
            continue
    return found


def _refuse(code: str, message: str, path: Path, what: str, **details: object) -> DataDirError:
    return DataDirError(code, message, details={"path": str(path), "what": what, **details})


#: The refusals `tolerating` lets pass in this context (a stop's own, see there).
_TOLERATED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "tether_dirs_tolerated", default=frozenset()
)


@contextlib.contextmanager
def tolerating(*codes: str) -> Iterator[None]:
    """`check_private_dir` (and so `usable_dir`) lets a directory pass that it would refuse
    with one of ``codes`` while the block runs in this context: for `tether stop`, which is
    never refused for a state dir of one's own that others may write to or that is reached
    through a symlink (it says so first, then stops). A tolerated symlink is checked as the
    directory it points to; a foreign directory is never tolerated."""
    unknown = set(codes) - {"insecure_directory", "symlinked_directory"}
    if unknown:
        raise ValueError(f"only insecure and symlinked directories are tolerated, not {unknown}")
    token = _TOLERATED.set(_TOLERATED.get() | frozenset(codes))
    try:
        yield
    finally:
        _TOLERATED.reset(token)


def _unless_tolerated(refusal: DataDirError) -> None:
    if refusal.code not in _TOLERATED.get():
        raise refusal


def check_private_dir(path: str | os.PathLike[str], *, what: str, missing_ok: bool = False) -> Path:
    """Refuse an existing directory another uid could control (see the module rules); tighten
    one of ours that others may read to 0700. ``missing_ok``: a path that does not exist is
    returned unchecked (a client looking for a daemon's record there finds none)."""
    p = Path(path)
    if missing_ok and not os.path.lexists(p):
        return p
    info = os.lstat(p)
    if stat.S_ISLNK(info.st_mode):
        _unless_tolerated(
            _refuse(
                "symlinked_directory",
                f"{what} {p} is a symlink to {os.path.realpath(p)}: give the real directory",
                p,
                what,
            )
        )
        info = os.stat(p)  # tolerated: the directory it points to is checked
    uid = os.geteuid()
    if info.st_uid != uid:
        raise _refuse(
            "foreign_directory",
            f"{what} {p} is owned by uid {info.st_uid}, not by you (uid {uid}): "
            "remove it or choose another directory",
            p,
            what,
            owner_uid=info.st_uid,
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        _unless_tolerated(
            _refuse(
                "insecure_directory",
                f"{what} {p} is writable by group or others (mode {mode:04o}): check its"
                f" contents, then `chmod 700 {p}`",
                p,
                what,
                mode=f"{mode:04o}",
            )
        )
    elif mode & 0o077:
        try:
            os.chmod(p, mode & 0o700)
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            # A read-only mount: nothing can be tightened, nor written; the store or the
            # command that writes there says so (`read_only_storage`).
    for parent in Path(os.path.abspath(p)).parents:
        try:
            up = os.stat(parent)
        except OSError:
            continue
        upmode = stat.S_IMODE(up.st_mode)
        loose = upmode & 0o002 and not upmode & stat.S_ISVTX
        if up.st_uid not in (0, uid) or loose:
            _unless_tolerated(
                _refuse(
                    "insecure_directory",
                    f"{what} {p} is under {parent}, which "
                    + (
                        f"is owned by uid {up.st_uid}"
                        if up.st_uid not in (0, uid)
                        else f"anyone may write to (mode {upmode:04o})"
                    )
                    + ": it could be swapped; choose a directory under one only you or root"
                    " control",
                    p,
                    what,
                    ancestor=str(parent),
                )
            )
    return p


def usable_dir(path: str | os.PathLike[str], *, what: str, create: bool = True) -> Path:
    """`path` as a private directory, created 0700 when missing (`create`, else refused); `what`
    names it in the error. Tightens the process umask first (`private_umask`)."""
    private_umask()
    p = Path(path)
    for parent in (p, *p.parents):
        if parent.is_symlink() and parent == p:
            break  # refused below, with what it points to
        if parent.exists():
            if not parent.is_dir():
                where = "is" if parent == p else f"is under {parent}, which is"
                raise DataDirError(
                    "not_a_directory",
                    f"{what} {p} {where} a file, not a directory",
                    details={"path": str(p), "file": str(parent), "what": what},
                )
            break
    if not create and not p.is_dir():
        raise DataDirError(
            "no_such_directory",
            f"{what} {p} does not exist",
            details={"path": str(p), "what": what},
        )
    if not os.path.lexists(p):
        try:
            p.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            from tether._sqlite_files import storage_failure

            raise DataDirError(
                # A read-only mount or a full disk: named as the stores name it (exit 6).
                storage_failure(exc) or "unusable_directory",
                f"{what} {p} cannot be created: {exc.strerror}",
                details={"path": str(p), "what": what},
            ) from exc
    return check_private_dir(p, what=what)


__all__ = [
    "CODES",
    "PRIVATE_UMASK",
    "DataDirError",
    "check_private_dir",
    "tolerating",
    "default_state_dir",
    "private_umask",
    "usable_dir",
]
