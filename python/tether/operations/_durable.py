"""Durable file writes for the operations journal: temp file, fsync, rename or link, fsync dir."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (a rename or link is durable only after this)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(directory: Path, stem: str, data: bytes) -> Path:
    tmp = directory / f".{stem}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def write_durable(path: Path, data: bytes) -> None:
    """Atomically replace `path` with `data`; readers see the old file or the whole new one."""
    tmp = _write_temp(path.parent, path.name, data)
    try:
        os.rename(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes) -> bool:
    """Create `path` holding `data` only if it does not exist; True if this call created it.

    The content is written and synced under a temporary name first and then hard-linked into
    place, so the create-if-absent is atomic *and* no reader ever sees an empty or partial file
    (a bare `O_CREAT|O_EXCL` followed by a write would leave an empty marker after a crash).
    """
    tmp = _write_temp(path.parent, path.name, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True
