"""Named crash-injection points for the crash matrix; a no-op unless `TETHER_CRASH_AT` is set.

`TETHER_CRASH_AT=name` SIGKILLs the process the first time `crash_point(name)` runs;
`name@N` on the N-th time. `TETHER_CRASH_RANDOM=seed:p` kills at any point with probability p.
The environment is read once at import, so normal runs pay one global lookup per point.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from typing import Final

#: Every injection point the runtime exposes, in protocol order.
CRASH_POINTS: Final = (
    "after_intent_tick",
    "after_admission",
    "after_claim",
    "after_bind",
    "during_effect",
    "after_effect",
    "after_result",
    "after_staging",
    "after_observation_tick",
    "after_settlement",
)


def _parse() -> tuple[str | None, int, random.Random | None, float]:
    target = os.environ.get("TETHER_CRASH_AT") or None
    nth = 1
    if target and "@" in target:
        target, _, count = target.partition("@")
        nth = int(count)
    rnd, prob = None, 0.0
    spec = os.environ.get("TETHER_CRASH_RANDOM")
    if spec:
        seed, _, p = spec.partition(":")
        rnd, prob = random.Random(int(seed)), float(p)
    return target, nth, rnd, prob


_TARGET, _NTH, _RANDOM, _PROB = _parse()
_ARMED: Final = _TARGET is not None or _RANDOM is not None
_hits = 0
_mutex = threading.Lock()


def crash_point(name: str) -> None:
    """SIGKILL this process if the crash environment selects `name`; otherwise do nothing."""
    if not _ARMED:
        return
    global _hits
    with _mutex:
        if name == _TARGET:
            _hits += 1
            if _hits == _NTH:
                os.kill(os.getpid(), signal.SIGKILL)
        if _RANDOM is not None and _RANDOM.random() < _PROB:
            os.kill(os.getpid(), signal.SIGKILL)
