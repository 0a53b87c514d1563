"""Helpers for tests that run a `Host` by hand: a lease clock moved by the test, and a drain
that runs one worker until it finds nothing to do."""

from __future__ import annotations

from tether.runtime import Host


class HandClock:
    """The catalog's lease clock (ms), moved by the test (`now`)."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def drain(host: Host) -> int:
    """Run one new worker of ``host`` until a round finds nothing; the rounds that did work."""
    worker = host.new_worker()
    n = 0
    while worker.run_once():
        n += 1
    worker.close()
    return n
