"""`FakeClock`: a manual millisecond clock for the catalog's leases and retry delays."""

from __future__ import annotations

import threading

from tether.runtime import ActivityRuntimeError

#: Where a `FakeClock` starts (ms): far from zero, so a step back stays positive.
START_MS = 1_000_000_000


class FakeClock:
    """Milliseconds that move only when the test moves them. Shareable across threads.

    Pass it wherever a `clock` is accepted (`Catalog.open`, `Host`); `ActivityEnvironment`
    does. `advance` moves time forward (leases and retry delays run out); `step` jumps either
    way, as a wall-clock step does.
    """

    def __init__(self, start_ms: int = START_MS) -> None:
        if not isinstance(start_ms, int) or start_ms < 0:
            raise ActivityRuntimeError("start_ms must be a non-negative int")
        self._now = start_ms
        self._mutex = threading.Lock()

    def __call__(self) -> int:
        with self._mutex:
            return self._now

    @property
    def now_ms(self) -> int:
        """The current time in milliseconds."""
        return self()

    def advance(self, ms: int) -> None:
        """Move time forward by `ms` (>= 0)."""
        if not isinstance(ms, int) or ms < 0:
            raise ActivityRuntimeError(f"advance takes ms >= 0, not {ms!r} (use step)")
        with self._mutex:
            self._now += ms

    def step(self, ms: int) -> None:
        """Jump by `ms`, forward or back (a wall-clock step); time never goes below zero."""
        if not isinstance(ms, int):
            raise ActivityRuntimeError(f"step takes an int of ms, not {ms!r}")
        with self._mutex:
            if self._now + ms < 0:
                raise ActivityRuntimeError(f"a step of {ms} ms would go below zero")
            self._now += ms

    def __repr__(self) -> str:
        return f"FakeClock(now_ms={self()})"
