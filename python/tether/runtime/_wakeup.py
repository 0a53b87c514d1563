"""`Wakeup`: what an idle runtime loop (a worker, the observer, `wait_settled`) waits on.

This is the one place where a loop sleeps. A loop takes a `mark` before it scans the catalog
and, when the scan found nothing to do, waits (`wait`) until the first of:
- its topic rings on the catalog's doorbell after the mark: a commit, in this process or in
  another one on the data directory, made an Activity claimable (admission, release, confirmed
  absence, a decision), recorded a result, or settled one (see `tether.storage.Doorbell`;
  a PostgreSQL catalog's doorbell is LISTEN/NOTIFY, `PostgresDoorbell`, reaching every host);
- its timer: the delay the loop passes; a worker passes the time until the earliest
  core-computed claimable time (a lease running out, a reconciliation backoff ending), read
  on the lease clock;
- the fallback poll (at least `MIN_FALLBACK_S`): it only covers a ring that never came (a
  process that died between its commit and its ring, an unusable doorbell directory);
- the stop event (`stop_all` sets it and wakes every waiter at once).

The timer is measured with a monotonic sleep: across a suspend, which the lease clock counts,
it fires late by at most the fallback poll.
"""

from __future__ import annotations

import threading
from typing import Final

from tether.runtime._errors import ActivityRuntimeError
from tether.storage import CLAIMABLE as CLAIMABLE
from tether.storage import RESULT as RESULT
from tether.storage import SETTLED as SETTLED
from tether.storage import WakeBell

#: The shortest fallback poll (s): loops never poll faster than this.
MIN_FALLBACK_S: Final = 1.0
#: The longest fallback poll (a day): a sleep's deadline past this is no deadline.
MAX_FALLBACK_S: Final = 86_400.0
#: The default fallback poll (s).
DEFAULT_FALLBACK_S: Final = 2.0


class Wakeup:
    """An idle loop's wait on one doorbell topic. Shareable across threads (every worker of a
    pool waits on the pool's).

    Args:
        stop: set once the loops must finish (use `stop_all` to also wake the waiters).
        fallback_s: the longest idle sleep without a ring (>= `MIN_FALLBACK_S`).
        doorbell: the catalog's doorbell (`Catalog.doorbell`); None waits on the stop event
            and timers only.
        topic: `CLAIMABLE` (workers), `RESULT` (the observer) or `SETTLED` (`wait_settled`).

    Attributes:
        waits, rung, timeouts: how many idle waits began, ended by a ring, ended by a timer
            or the fallback poll (for tests and benchmarks: an idle loop does not spin).
    """

    def __init__(
        self,
        stop: threading.Event,
        fallback_s: float = DEFAULT_FALLBACK_S,
        *,
        doorbell: WakeBell | None = None,
        topic: int = CLAIMABLE,
    ) -> None:
        if not fallback_s >= MIN_FALLBACK_S:
            raise ActivityRuntimeError(
                f"the fallback poll must be at least {MIN_FALLBACK_S} s, not {fallback_s!r}"
            )
        if topic not in (CLAIMABLE, RESULT, SETTLED):
            raise ActivityRuntimeError(f"unknown doorbell topic {topic!r}")
        self.stop = stop
        self.fallback_s = float(fallback_s)
        self.doorbell = doorbell
        self.topic = topic
        self._listening = False
        self._listen_lock = threading.Lock()
        self.waits = 0
        self.rung = 0
        self.timeouts = 0

    @property
    def stopping(self) -> bool:
        """Whether the loops must finish."""
        return self.stop.is_set()

    def mark(self) -> int:
        """The topic's ring count: take it before scanning, pass it to `wait`.

        The first mark starts listening for other processes' rings, so none after it is lost.
        """
        if self.doorbell is None:
            return 0
        if not self._listening:
            with self._listen_lock:
                if not self._listening:
                    self.doorbell.listen()
                    self._listening = True
        return self.doorbell.mark(self.topic)

    def wait(self, mark: int | None = None, *, delay_s: float | None = None) -> bool:
        """Sleep until the topic rang since ``mark``, ``delay_s`` passed, the fallback poll
        passed or the loops must finish; True once they must finish.

        Without ``mark`` only the timers and the stop event end the wait.
        """
        if self.stop.is_set():
            return True
        timeout = self.fallback_s if delay_s is None else max(0.0, min(self.fallback_s, delay_s))
        self.waits += 1
        if self.doorbell is None or mark is None:
            self.stop.wait(timeout)
            self.timeouts += 1
            return self.stop.is_set()
        if self.doorbell.wait(self.topic, mark, timeout, self.stop):
            self.rung += 1
        elif not self.stop.is_set():
            self.timeouts += 1
            if timeout == self.fallback_s:
                self.doorbell.repair()  # a lost socket file is why no ring came
        return self.stop.is_set()

    def stop_all(self) -> None:
        """Set the stop event and wake every waiter of this process at once."""
        self.stop.set()
        if self.doorbell is not None:
            self.doorbell.poke()

    def close(self) -> None:
        """Stop listening for other processes' rings (once every loop finished). Idempotent."""
        with self._listen_lock:
            if self._listening and self.doorbell is not None:
                self.doorbell.unlisten()
            self._listening = False
