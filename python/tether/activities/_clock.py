"""The catalog's clock port: a lease clock that wall-clock steps never move, and the wall clock.

Every catalog transition takes one `Now` reading. Leases and reconciliation backoff are measured
on the lease clock (``boot_ms`` on boot ``boot_id``); the Rust core treats a lease-clock value
of another boot as passed, so a lease from before a reboot has expired. Record times
(``*_at_ms``) are wall-clock, for people, and decide nothing. The clock is a port: the default
`SystemClock` reads the host's CLOCK_BOOTTIME and boot id; a backend whose server keeps time
(PostgreSQL) can pass its own `CatalogClock`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tether._core import CatalogConfigError

#: Where Linux publishes the id of the current boot (a new one at every boot).
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True, slots=True)
class Now:
    """One reading of the catalog clock.

    Attributes:
        boot_id: the lease clock's domain: the host's boot id.
        boot_ms: lease-clock milliseconds (CLOCK_BOOTTIME: runs through suspend, never steps).
        wall_ms: wall-clock milliseconds since the epoch, for record times only.
    """

    boot_id: str
    boot_ms: int
    wall_ms: int


class CatalogClock(Protocol):
    """Where a catalog reads time: one `Now` per transition."""

    def now(self) -> Now: ...


def wall_clock_ms() -> int:
    """Wall-clock milliseconds since the epoch: record times for people, never a lease."""
    return time.time_ns() // 1_000_000


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """The id of the current boot.

    Raises:
        CatalogConfigError: the host publishes none (not Linux); pass a `CatalogClock`.
    """
    try:
        with open(path, encoding="ascii") as f:
            boot_id = f.read().strip()
    except OSError as e:
        raise CatalogConfigError(
            f"cannot read the boot id from {path} ({e}); pass the catalog a clock"
        ) from e
    if not boot_id:
        raise CatalogConfigError(f"{path} is empty; pass the catalog a clock")
    return boot_id


class SystemClock:
    """The host's clocks: CLOCK_BOOTTIME and the boot id for leases, the wall clock for record
    times. A wall-clock step (NTP, an operator, a VM resume) moves no lease and no backoff.

    Args:
        wall_ms: the wall-clock source (default `wall_clock_ms`).
        boot_id: the boot id (default: read once from `BOOT_ID_PATH`).

    Raises:
        CatalogConfigError: the host has no CLOCK_BOOTTIME or boot id (not Linux).
    """

    def __init__(
        self, *, wall_ms: Callable[[], int] | None = None, boot_id: str | None = None
    ) -> None:
        clock_id = getattr(time, "CLOCK_BOOTTIME", None)
        if clock_id is None:
            raise CatalogConfigError("this host has no CLOCK_BOOTTIME; pass the catalog a clock")
        self._clock_id: int = clock_id
        self._wall = wall_ms if wall_ms is not None else wall_clock_ms
        self.boot_id = boot_id if boot_id is not None else read_boot_id()

    def now(self) -> Now:
        boot_ms = time.clock_gettime_ns(self._clock_id) // 1_000_000
        return Now(self.boot_id, boot_ms, self._wall())


class FixedBootClock:
    """A clock made of one callable of integer milliseconds, for tests and tools that set time
    by hand: its value is both the lease clock, on one fixed boot, and the wall clock.

    Args:
        ms: the millisecond source.
        boot_id: the fixed boot (default ``"fixed"``; change it to simulate a reboot).
    """

    def __init__(self, ms: Callable[[], int], *, boot_id: str = "fixed") -> None:
        self._ms = ms
        self.boot_id = boot_id

    def now(self) -> Now:
        ms = self._ms()
        return Now(self.boot_id, ms, ms)


ClockLike = CatalogClock | Callable[[], int]
"""A `CatalogClock`, or a callable of integer milliseconds (taken as a `FixedBootClock`)."""


def as_clock(clock: ClockLike | None) -> CatalogClock:
    """The `CatalogClock` for ``clock``: `SystemClock` for None, a `FixedBootClock` for a plain
    millisecond callable, ``clock`` itself when it has a ``now()`` method."""
    if clock is None:
        return SystemClock()
    if callable(getattr(clock, "now", None)):
        return clock  # type: ignore[return-value]
    if callable(clock):
        return FixedBootClock(clock)
    raise TypeError(f"clock must be a CatalogClock or a callable, not {type(clock).__name__}")
