"""The AG-UI activity store as Python callers build it: judged by today's date.

The Rust store (`tether._core.ActivityStore`) reads no clock. Deprecated forms the protocol
tolerates for a while (today only `rawEvent: null`, until `RAW_EVENT_NULL_EXPIRES`) are judged
by the date it is given, and without one it applies the strict reading. This subclass gives it
the local date by default, so a store built in Python follows the protocol as of today.
"""

from __future__ import annotations

import datetime
from typing import Literal, Self

from tether import _core

__all__ = ["RAW_EVENT_NULL_EXPIRES", "ActivityStore", "Lifecycle"]

#: ``"strict"``: every run-lifecycle rule from the first event. ``"partial"``: the stream may
#: begin mid-run (a partial capture); from its first RUN_STARTED or RUN_ERROR on, every rule.
Lifecycle = Literal["strict", "partial"]

#: The first day on which `rawEvent: null` is fatal (until then: absent, with a warning).
RAW_EVENT_NULL_EXPIRES: datetime.date = _core.AGUI_RAW_EVENT_NULL_EXPIRES


class ActivityStore(_core.ActivityStore):
    """One AG-UI thread's ordered message history, built from events (dicts or bytes).

    Single owner: not for concurrent use from several threads.

    The run lifecycle is enforced: the stream begins with RUN_STARTED (or RUN_ERROR), a run is
    not started twice, RUN_FINISHED names the open run's thread and run ids, and after the end
    only a new RUN_STARTED or a late RUN_ERROR may follow. Each violation raises
    `AguiSequenceError` (codes ``run_not_started``, ``run_already_started``,
    ``run_id_mismatch``, ``event_after_run_finished``) and changes nothing.

    Args:
        today: the date deprecation windows are judged by; the local date when omitted.
        lifecycle: ``"partial"`` to replay a capture that may begin mid-run: until its first
            RUN_STARTED or RUN_ERROR, events count as inside a run whose ids are unknown.
    """

    def __new__(
        cls, *, today: datetime.date | None = None, lifecycle: Lifecycle = "strict"
    ) -> Self:
        today = datetime.date.today() if today is None else today
        return super().__new__(cls, today=today, lifecycle=lifecycle)
