"""Directories Tether keeps state in (a data dir, a host's state dir), checked before use.

A path that is a file, or under a file, or that cannot be created is refused with one
`DataDirError` naming the path and what it is for, before anything is opened or written under
it, instead of failing later inside SQLite, the artifact store or a lock with a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from tether._coded import CodedError

#: The codes a DataDirError carries (`not_a_data_dir`: a directory without a Tether catalog).
CODES: Final = ("no_such_directory", "not_a_directory", "unusable_directory", "not_a_data_dir")


class DataDirError(CodedError):
    """A data or state directory cannot be used (it is a file, or cannot be created)."""


def usable_dir(path: str | os.PathLike[str], *, what: str, create: bool = True) -> Path:
    """`path` as a directory, created when missing (`create`, else refused); `what` names it
    in the error."""
    p = Path(path)
    for parent in (p, *p.parents):
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
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(
            "unusable_directory",
            f"{what} {p} cannot be created: {exc.strerror}",
            details={"path": str(p), "what": what},
        ) from exc
    return p


__all__ = ["CODES", "DataDirError", "usable_dir"]
