"""`Wakeup`: what an idle runtime loop (a worker, the observer) waits on between passes.

This is the one place where a loop sleeps. Today a loop waits on the Host's stop event for at
most one poll interval; an event-driven wakeup (an Activity became claimable, a result was
recorded) is added here, and every loop that waits on this object gets it.
"""

from __future__ import annotations

import threading

from tether.runtime._errors import ActivityRuntimeError


class Wakeup:
    """An idle loop's wait: the stop event, for at most `interval_s`. Shareable across threads.

    Args:
        stop: set once the loops must finish; a waiting loop returns at once.
        interval_s: the longest idle sleep (the poll interval).
    """

    def __init__(self, stop: threading.Event, interval_s: float) -> None:
        if interval_s < 0:
            raise ActivityRuntimeError("interval_s must be >= 0")
        self.stop = stop
        self.interval_s = interval_s

    @property
    def stopping(self) -> bool:
        """Whether the loops must finish."""
        return self.stop.is_set()

    def wait(self) -> bool:
        """Sleep until woken or the interval passed; True once the loops must finish."""
        return self.stop.wait(self.interval_s)
