"""This process's exact-world locks: one re-entrant lock per world, shared by every ledger."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _WorldLock:
    """A re-entrant per-world lock that can tell whether the calling thread holds it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    def held_by_me(self) -> bool:
        return self._owner == threading.get_ident()


class WorldLocks:
    """The per-process registry of exact-world locks (thread-safe)."""

    def __init__(self) -> None:
        self._locks: dict[str, _WorldLock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def lock(self, world_id: str) -> Iterator[None]:
        """The exact-world lock (re-entrant for its holder), as a context manager."""
        with self._guard:
            lock = self._locks.setdefault(world_id, _WorldLock())
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def holds(self, world_id: str | None = None) -> bool:
        """Whether the calling thread holds the lock of `world_id` (or of any world)."""
        with self._guard:
            locks = list(self._locks.items())
        return any(lk.held_by_me() for w, lk in locks if world_id is None or w == world_id)
