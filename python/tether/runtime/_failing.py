"""How a loop that retries logs its failures (a worker's attempts, the observer's steps)."""

from __future__ import annotations

import logging
import time

#: While a loop keeps failing the same way, one line at most this often (s).
REPEAT_LOG_S = 60.0


class Failing:
    """The first failure of a kind with its traceback; the same one again, while it keeps
    failing, as one line at most every `REPEAT_LOG_S` with its count (a server that is down
    fails every poll); one line when it works again. ``label`` names the loop (`worker w0`,
    `observer`), ``what`` what failed (`attempt`, `step`)."""

    def __init__(self, log: logging.Logger, label: str, what: str) -> None:
        self.log = log
        self.label = label
        self.what = what
        self._seen: tuple[str, str] | None = None
        self._count = 0
        self._logged_at = 0.0

    def failed(self, exc: Exception) -> None:
        kind = (type(exc).__name__, str(exc).partition("\n")[0])
        now = time.monotonic()
        if kind != self._seen:
            self._seen, self._count, self._logged_at = kind, 1, now
            self.log.error("%s: %s failed", self.label, self.what, exc_info=exc)
            return
        self._count += 1
        if now - self._logged_at >= REPEAT_LOG_S:
            self._logged_at = now
            self.log.error("%s: still failing (%d times): %s: %s", self.label, self._count, *kind)

    def over(self) -> None:
        if self._seen is not None:
            self.log.info("%s: working again after %d failures", self.label, self._count)
            self._seen, self._count = None, 0
