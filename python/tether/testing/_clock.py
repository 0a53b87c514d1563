"""`FakeClock`: a manual `CatalogClock`: a lease clock and a wall clock that move when told."""

from __future__ import annotations

import threading

from tether.activities import Now
from tether.runtime import ActivityRuntimeError

#: Where a `FakeClock` starts (ms): far from zero, so a step back stays positive.
START_MS = 1_000_000_000


class FakeClock:
    """Time that moves only when the test moves it. Shareable across threads.

    Pass it wherever a `clock` is accepted (`Catalog.open`, `Host`); `ActivityEnvironment`
    does. Like the host's `SystemClock` it has two clocks: the lease clock (leases and retry
    delays) on a boot, and the wall clock (record times). `advance` lets time pass on both
    (leases and retry delays run out); `step` jumps the wall clock either way, as NTP or an
    operator does, and no lease or delay notices; `reboot` starts a new boot, on which every
    earlier lease has expired.
    """

    def __init__(self, start_ms: int = START_MS) -> None:
        if not isinstance(start_ms, int) or start_ms < 0:
            raise ActivityRuntimeError("start_ms must be a non-negative int")
        self._boot = 1
        self._boot_ms = start_ms
        self._wall_ms = start_ms
        self._mutex = threading.Lock()

    def now(self) -> Now:
        """The catalog's reading: boot id, lease-clock ms, wall-clock ms."""
        with self._mutex:
            return Now(f"fake-boot-{self._boot}", self._boot_ms, self._wall_ms)

    def __call__(self) -> int:
        """The wall-clock time in milliseconds."""
        with self._mutex:
            return self._wall_ms

    @property
    def now_ms(self) -> int:
        """The wall-clock time in milliseconds."""
        return self()

    @property
    def boot_ms(self) -> int:
        """The lease-clock time in milliseconds (what leases and retry delays run on)."""
        with self._mutex:
            return self._boot_ms

    def advance(self, ms: int) -> None:
        """Let `ms` (>= 0) pass: both clocks move forward."""
        if not isinstance(ms, int) or ms < 0:
            raise ActivityRuntimeError(f"advance takes ms >= 0, not {ms!r} (use step)")
        with self._mutex:
            self._boot_ms += ms
            self._wall_ms += ms

    def step(self, ms: int) -> None:
        """Jump the wall clock by `ms`, forward or back (never below zero); leases and retry
        delays do not move."""
        if not isinstance(ms, int):
            raise ActivityRuntimeError(f"step takes an int of ms, not {ms!r}")
        with self._mutex:
            if self._wall_ms + ms < 0:
                raise ActivityRuntimeError(f"a step of {ms} ms would go below zero")
            self._wall_ms += ms

    def reboot(self, boot_ms: int = 0) -> None:
        """A new boot: the lease clock starts again at `boot_ms`; earlier leases have expired."""
        if not isinstance(boot_ms, int) or boot_ms < 0:
            raise ActivityRuntimeError("boot_ms must be a non-negative int")
        with self._mutex:
            self._boot += 1
            self._boot_ms = boot_ms

    def __repr__(self) -> str:
        now = self.now()
        return f"FakeClock(boot_id={now.boot_id!r}, boot_ms={now.boot_ms}, wall_ms={now.wall_ms})"
