"""An exclusive `flock` taken without blocking, tried again for a while: for a lock file that
other processes test (taking it shared for an instant) or hold for a bounded time."""

from __future__ import annotations

import fcntl
import time


def take_exclusive(fd: int, *, within_s: float, every_s: float = 0.005) -> None:
    """An exclusive non-blocking `flock` on ``fd``, tried every ``every_s`` for up to
    ``within_s``; `BlockingIOError` when another process still holds it then."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(every_s)


__all__ = ["take_exclusive"]
