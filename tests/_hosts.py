"""Helpers for tests that run a `Host` by hand: a lease clock moved by the test, a drain
that runs one worker until it finds nothing to do, and the echo family's projection and
staging (one Activity per `echo.intent`, its result observed as `echo.observed`)."""

from __future__ import annotations

from typing import Any

from tether.runtime import ActivityRequest, Host
from tether.world import ComponentWrite

#: The echo family's kind.
ECHO_KIND = "demo.echo"


def echo_project(snapshot: Any) -> list[ActivityRequest]:
    """One echo Activity per `echo.intent` the tick changed, its value the input."""
    return [ActivityRequest(ECHO_KIND, e, v) for e, v in snapshot.changed("echo.intent")]


def echo_stage(staged: Any) -> list[ComponentWrite]:
    """An echo result, observed whole as `echo.observed`."""
    return [ComponentWrite(staged.key.activity_id, "echo.observed", staged.json())]


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
