"""SQLite store files checked before they are opened, and storage failures named in one line.

A catalog or world file that exists is checked before SQLite opens it: a file cut short (to 0
bytes, to half, anywhere inside a page or below the page count its header records) or one that
is not a SQLite database is refused with `StoreFileError` (`store_truncated`,
`not_a_database`), naming the file and what to do, before anything reads or writes it: SQLite
would take a 0-byte file for an empty database and create a fresh schema in it, so a data
directory whose world names Activities would wait forever for a catalog that forgot them.

A new file is created complete: under a temporary name, with its first page (WAL mode)
written and synced, then linked into place, so a crash never leaves a 0-byte store behind and
a 0-byte store is always damage.

The check reads the file itself, which it must never do while this process holds SQLite
connections to it: closing any descriptor of a file drops every POSIX lock the process holds
on it (SQLite's own included, which it keeps for as long as a connection is open), and another
process (`tether db prune`, a second worker) closing its connection then takes itself for the
last one and deletes the write-ahead log under the open ones: their commits go to a deleted
file and the next read is a "disk I/O error". So a store opens its file through
`hold_sqlite_file`, which checks it (or creates it) only where no store of this process holds
it, and counts it held until the store's `FileHold.release`.

`storage_failure(exc)` names a failed write of the disk under a store or a provider:
`disk_full` (ENOSPC, EDQUOT, SQLite's "database or disk is full"), `file_too_large` (EFBIG: a
file-size limit), `read_only_storage` (EROFS, SQLite's "readonly database", a store refused by
`check_writable`) or `storage_io_error` (SQLite's "disk I/O error"), looking through the
exception's causes; None for anything else.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import struct
import threading
from pathlib import Path
from typing import Final

from tether._coded import CodedError

#: The codes a StoreFileError carries.
CODES: Final = (
    "store_truncated",
    "not_a_database",
    "disk_full",
    "file_too_large",
    "read_only_storage",
)
_MAGIC: Final = b"SQLite format 3\x00"
_HEADER: Final = 100
# SQLite's primary result codes for a full disk and an I/O error.
_SQLITE_FULL: Final = 13
_SQLITE_IOERR: Final = 10
_SQLITE_READONLY: Final = 8


class StoreFileError(CodedError):
    """A store file that cannot be used as it is (`code` in `CODES`); nothing was written to
    it. `details`: the path and what the file is."""


#: The store files this process holds SQLite connections to, by (device, inode): how many
#: stores hold each (`hold_sqlite_file`). Counted and checked under `_HELD_GUARD`.
_HELD: dict[tuple[int, int], int] = {}
_HELD_GUARD = threading.Lock()


class FileHold:
    """A store's hold on its file (`hold_sqlite_file`): `release` it once the store's
    connections are closed (a second release does nothing)."""

    __slots__ = ("_identity",)

    def __init__(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity

    def release(self) -> None:
        with _HELD_GUARD:
            identity, self._identity = self._identity, None
            if identity is None:
                return
            left = _HELD.get(identity, 0) - 1
            if left > 0:
                _HELD[identity] = left
            else:
                _HELD.pop(identity, None)


def hold_sqlite_file(path: str | os.PathLike[str], *, what: str) -> FileHold:
    """`prepare_sqlite_file`, and the file counted as held by one more store of this process
    until the hold's `release`: while any is held, the file is not read again (see the module
    docstring). Call it before the store connects; release it after the store closed its
    connections (and where its opening failed)."""
    with _HELD_GUARD:
        prepare_sqlite_file(path, what=what)
        try:
            st = os.stat(path)
        except OSError:
            return FileHold(None)  # the store's own open reports it, typed
        identity = (st.st_dev, st.st_ino)
        _HELD[identity] = _HELD.get(identity, 0) + 1
        return FileHold(identity)


def _held(st: os.stat_result) -> bool:
    return (st.st_dev, st.st_ino) in _HELD


def check_sqlite_file(path: str | os.PathLike[str], *, what: str) -> None:
    """Refuse an existing `path` that is cut short or is no SQLite database (a missing file is
    fine: it is created when opened). A file a store of this process holds open
    (`hold_sqlite_file`) was checked when it was first opened, and is not read again."""
    p = Path(path)
    try:
        st = p.stat()
        size = st.st_size
        if _held(st):
            return
        with open(p, "rb") as f:
            header = f.read(_HEADER)
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise StoreFileError(  # a path that names the wrong thing: no store to restore
            "not_a_database",
            f"{what} {p} is a directory, not a database file: name the store's file (nothing"
            " was written)",
            details={"path": str(p), "what": what},
        ) from None
    if size and header[:16] != _MAGIC and _text(header):
        raise StoreFileError(
            "not_a_database",
            f"{what} {p} is a text file, not a SQLite database; nothing was written to it:"
            " if it is not the store's file, name that one; if it is, restore it from a"
            " backup (or move it aside to start that store over, losing what it held)",
            details={"path": str(p), "what": what},
        )
    if size == 0:
        raise _error("store_truncated", p, what, "is empty (0 bytes): it was cut short")
    if len(header) < _HEADER:
        raise _error("store_truncated", p, what, f"is {size} bytes, shorter than its header")
    if header[:16] != _MAGIC:
        raise _error("not_a_database", p, what, "is not a SQLite database")
    (page_size,) = struct.unpack(">H", header[16:18])
    page_size = 65536 if page_size == 1 else page_size
    (changes,) = struct.unpack(">I", header[24:28])
    (pages,) = struct.unpack(">I", header[28:32])
    (valid_for,) = struct.unpack(">I", header[92:96])
    if page_size < 512 or page_size & (page_size - 1):
        raise _error("not_a_database", p, what, f"has no valid page size ({page_size})")
    if size % page_size:
        raise _error("store_truncated", p, what, f"is {size} bytes, not a whole number of pages")
    missing = pages * page_size - size if pages and changes == valid_for else 0
    if missing > 0 and _wal_frames(p, page_size) * page_size < missing:
        # (An interrupted checkpoint leaves the main file short of its header's page count,
        # with the missing pages still in the write-ahead log: that is no damage.)
        raise _error(
            "store_truncated",
            p,
            what,
            f"is {size} bytes but its header records {pages} pages of {page_size}",
        )


def _text(head: bytes) -> bool:
    """Whether a file's first bytes are text (UTF-8, printable or white space): no database
    page, damaged or not, starts so."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not only a character cut short at the header's end
            return False
        text = head[: exc.start].decode("utf-8")
    return all(c.isprintable() or c in "\t\r\n" for c in text)


def _wal_frames(path: Path, page_size: int) -> int:
    """How many frames the write-ahead log beside `path` can hold (0 without one)."""
    try:
        wal = Path(f"{path}-wal").stat().st_size
    except FileNotFoundError:
        return 0
    return max(0, wal - 32) // (24 + page_size)


def _error(code: str, path: Path, what: str, problem: str) -> StoreFileError:
    path = Path("/" + str(path).lstrip("/")) if path.is_absolute() else path
    return StoreFileError(
        code,
        f"{what} {path} {problem}; nothing was written to it: restore it from a backup (or "
        "move it aside to start that store over, losing what it held), then run the command "
        "again",
        details={"path": str(path), "what": what},
    )


def check_writable(path: str | os.PathLike[str], *, what: str) -> None:
    """Refuse a store file (existing or to be made) that this process cannot write:
    `read_only_storage` when its directory is on a read-only mount, or it or its directory may
    not be written by this process (SQLite writes its log and shared memory beside the file,
    and opens no store in write-ahead-log mode otherwise). A missing directory is left to the
    caller."""
    p = Path(path)
    try:
        mount = os.statvfs(p.parent)
    except OSError:
        return
    if mount.f_flag & os.ST_RDONLY:
        why = f"its directory {p.parent} is on a read-only file system"
    elif not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        why = f"this process may not write {p if p.exists() else p.parent} (its permissions)"
    else:
        return
    raise StoreFileError(
        "read_only_storage",
        f"cannot use {what} {p}: {why}; Tether writes its stores (and their logs beside them)",
        details={"path": str(p), "what": what},
    )


def prepare_sqlite_file(path: str | os.PathLike[str], *, what: str) -> None:
    """Check an existing store file (`check_sqlite_file`), or create a new one complete; either
    refused where this process cannot write it (`check_writable`)."""
    p = Path(path)
    if p.exists():
        check_sqlite_file(p, what=what)
        check_writable(p, what=what)
        return
    if not p.parent.is_dir():
        from tether._dirs import DataDirError

        gone = not p.parent.exists()
        raise DataDirError(
            "no_such_directory" if gone else "not_a_directory",
            f"{what} {p}: its directory {p.parent} "
            + ("does not exist" if gone else "is a file, not a directory"),
            details={"path": str(p), "what": what},
        )
    check_writable(p, what=what)
    tmp = p.with_name(f".{p.name}.new-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")  # writes the first page
            finally:
                conn.close()
        except sqlite3.Error as exc:
            failed = _failed(exc, p, what)
            if failed is None:
                return  # not the disk: the store's own open reports it, typed
            raise failed from exc
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, p)  # a concurrent creator's file stands
        except FileExistsError:
            pass
        fd = os.open(p.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


def _failed(exc: BaseException, path: Path, what: str) -> StoreFileError | None:
    kind = storage_failure(exc)
    if kind in ("disk_full", "file_too_large"):
        return StoreFileError(
            kind, f"cannot create {what} {path}: {describe(kind)}", details={"path": str(path)}
        )
    return None


def storage_failure(exc: BaseException | None) -> str | None:
    """`disk_full`, `file_too_large`, `read_only_storage`, `storage_io_error` or None (see the
    module docstring)."""
    seen = 0
    while exc is not None and seen < 20:
        seen += 1
        if isinstance(exc, StoreFileError) and exc.code in (
            "disk_full",
            "file_too_large",
            "read_only_storage",
        ):
            return exc.code
        if isinstance(exc, OSError):
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                return "disk_full"
            if exc.errno == errno.EFBIG:
                return "file_too_large"
            if exc.errno == errno.EROFS:
                return "read_only_storage"
        if isinstance(exc, sqlite3.Error):
            code = getattr(exc, "sqlite_errorcode", None)
            primary = None if code is None else code & 0xFF
            if primary == _SQLITE_FULL or "database or disk is full" in str(exc):
                return "disk_full"
            if primary == _SQLITE_READONLY or "attempt to write a readonly database" in str(exc):
                return "read_only_storage"
            if primary == _SQLITE_IOERR or "disk I/O error" in str(exc):
                return "storage_io_error"
        text = str(exc)
        if "No space left on device" in text or "database or disk is full" in text:
            return "disk_full"
        if "File too large" in text:
            return "file_too_large"
        if "disk I/O error" in text:
            return "storage_io_error"
        exc = exc.__cause__ or exc.__context__
    return None


def describe(kind: str) -> str:
    """One phrase for a `storage_failure` kind."""
    return {
        "disk_full": "no space left on the disk",
        "file_too_large": "a file reached the file-size limit",
        "storage_io_error": "the disk failed a write (an I/O error)",
        "read_only_storage": "the storage is read-only (a read-only mount or its permissions)",
    }.get(kind, kind)


__all__ = [
    "CODES",
    "StoreFileError",
    "FileHold",
    "check_sqlite_file",
    "hold_sqlite_file",
    "describe",
    "prepare_sqlite_file",
    "storage_failure",
]
