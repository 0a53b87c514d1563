"""The runtime's named crash-injection points (`TETHER_CRASH_AT`, the one mechanism in
`tether._crash` that the providers use too)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Final

from tether._crash import crash_point as _crash_point

#: The variable naming a point where this process stops itself (SIGSTOP) the first time it
#: passes, for tests of a worker paused past its lease (SIGCONT resumes it).
PAUSE_ENV: Final = "TETHER_PAUSE_AT"
_PAUSE: Final = os.environ.get(PAUSE_ENV) or None
_paused = threading.Event()

#: Every injection point the runtime exposes, in protocol order.
CRASH_POINTS: Final = (
    "after_intent_tick",
    "after_refusal_document",
    "after_admission",
    "after_claim",
    "after_bind",
    "during_effect",
    "artifact_temp_written",
    "after_effect",
    "after_result",
    "after_staging",
    "after_observation_tick",
    "after_settlement",
)


def crash_point(name: str, *, attempt: int | None = None) -> None:
    """`tether._crash.crash_point`, and, once, a SIGSTOP of this process at the point
    `TETHER_PAUSE_AT` names (a no-op unless that is set)."""
    _crash_point(name, attempt=attempt)
    if _PAUSE is not None and name == _PAUSE and not _paused.is_set():
        _paused.set()
        os.kill(os.getpid(), signal.SIGSTOP)


__all__ = ["CRASH_POINTS", "PAUSE_ENV", "crash_point"]
