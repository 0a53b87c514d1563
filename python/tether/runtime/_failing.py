"""How a loop that retries logs its failures (a worker's attempts, the observer's steps)."""

from __future__ import annotations

import logging
import time

#: While a loop keeps failing the same way, one line at most this often (s).
REPEAT_LOG_S = 60.0


def _line(exc: BaseException) -> str:
    """An error as one line (a driver's message may hold newlines and tabs)."""
    return " ".join(str(exc).split())


def _expected(exc: BaseException) -> bool:
    """A Tether error with a code (a store that cannot be reached, say): its line says it all,
    no traceback; anything else is a bug and keeps its traceback, a family's broken contract
    too (coded, but its traceback shows where the family broke it)."""
    from tether.errors import TetherError
    from tether.runtime._errors import FamilyError, ProviderIOForbidden

    if isinstance(exc, FamilyError | ProviderIOForbidden):
        return False
    return isinstance(exc, TetherError) and isinstance(getattr(exc, "code", None), str)


class Failing:
    """The first failure of a kind, with its traceback unless it is an expected coded error (a
    store that cannot be reached: one line); the same one again, while it keeps failing, as
    one line at most every `REPEAT_LOG_S` with the count of failures so far (a server that is
    down fails every poll); one line, with that count, when it works again. ``label`` names
    the loop (`worker w0`, `observer`), ``what`` what failed (`attempt`, `step`)."""

    def __init__(self, log: logging.Logger, label: str, what: str) -> None:
        self.log = log
        self.label = label
        self.what = what
        self._seen: tuple[str, str] | None = None
        self._count = 0  # failures since the last success, of any kind
        self._logged_at = 0.0

    def failed(self, exc: Exception) -> None:
        kind = (type(exc).__name__, _line(exc))
        now = time.monotonic()
        self._count += 1
        if kind != self._seen:
            self._seen, self._logged_at = kind, now
            if _expected(exc):
                self.log.error("%s: %s failed: %s", self.label, self.what, kind[1])
            else:
                self.log.error("%s: %s failed", self.label, self.what, exc_info=exc)
            return
        if now - self._logged_at >= REPEAT_LOG_S:
            self._logged_at = now
            self.log.error("%s: still failing (%d times): %s: %s", self.label, self._count, *kind)

    def over(self) -> None:
        if self._seen is not None:
            self.log.info("%s: working again after %d failures", self.label, self._count)
            self._seen, self._count = None, 0
