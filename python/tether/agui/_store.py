"""The AG-UI activity store as Python callers build it: judged by today's date.

The Rust store (`tether._core.ActivityStore`) reads no clock. Deprecated forms the protocol
tolerates for a while (today only `rawEvent: null`, until `RAW_EVENT_NULL_EXPIRES`) are judged
by the date it is given, and without one it applies the strict reading. This subclass gives it
the local date by default, so a store built in Python follows the protocol as of today.
"""

from __future__ import annotations

import datetime
from typing import Self

from tether import _core

__all__ = ["RAW_EVENT_NULL_EXPIRES", "ActivityStore"]

#: The first day on which `rawEvent: null` is fatal (until then: absent, with a warning).
RAW_EVENT_NULL_EXPIRES: datetime.date = _core.AGUI_RAW_EVENT_NULL_EXPIRES


class ActivityStore(_core.ActivityStore):
    """One AG-UI thread's ordered message history, built from events (dicts or bytes).

    Single owner: not for concurrent use from several threads.

    Args:
        today: the date deprecation windows are judged by; the local date when omitted.
    """

    def __new__(cls, *, today: datetime.date | None = None) -> Self:
        return super().__new__(cls, today=datetime.date.today() if today is None else today)
